"""Keys made by DRF's ``authtoken`` (before django-rest-knox) keep working: each becomes an
``ApiToken`` with knox's digest of the same key, then DRF's table, which held the keys in
plain text, is dropped.

knox hashes a key as ``sha512(key.encode()).hexdigest()`` (``knox.crypto.hash_token``) and
finds it by its first 15 characters (``token_key``); DRF's keys are 40 hex characters, so
both carry over as they are. The token is named "token from before <date>", never expires,
and keeps its creation time. A database that never had DRF's table (a new installation)
has nothing to copy. Irreversible: the plain keys are gone.
"""

from django.db import migrations

from knox.crypto import hash_token
from knox.settings import CONSTANTS

OLD_TABLE = "authtoken_token"


def copy_drf_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("tenants", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {OLD_TABLE}")
        old = cursor.fetchall()
    tokens = [
        ApiToken(
            digest=hash_token(key),
            token_key=key[: CONSTANTS.TOKEN_KEY_LENGTH],
            user_id=user_id,
            name=f"token from before {created:%Y-%m-%d}",
            expiry=None,
        )
        for key, user_id, created in old
    ]
    ApiToken.objects.bulk_create(tokens)
    for token, (_key, _user, created) in zip(tokens, old, strict=True):
        ApiToken.objects.filter(digest=token.digest).update(created=created)  # auto_now_add
    schema_editor.execute(f"DROP TABLE {OLD_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("tenants", "0004_api_tokens")]

    operations = [migrations.RunPython(copy_drf_tokens, migrations.RunPython.noop)]
