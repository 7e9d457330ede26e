"""A Kubernetes cluster for tests, in-process: no cluster can run on the project's machines.

What it is
- ``emulator.Emulator``: an API server over HTTPS on 127.0.0.1 (a random port; its own CA;
  a bearer token), aiohttp in a thread of its own. The official ``kubernetes`` client
  reaches it through the kubeconfig that ``write_kubeconfig`` writes.
- ``kubelet.FakeKubelet``: a thread that schedules and runs the emulator's Pods on one node,
  on rules the test sets (unschedulable, a slow pull, image pull error, exit code, OOM,
  node lost, log lines, metrics), writing their status and Events as the real scheduler
  and kubelet do;
  it also holds a Pod back for a missing claim or Secret and for a ``nodeSelector`` the
  node's labels do not meet. Its parts: ``podstatus`` (the status written at each step),
  ``prerequisites`` (claims, Secrets, node labels), ``events``.
- ``fixtures``: ``kube_cluster`` (per module) and ``kube`` (per test, emptied), or a real
  cluster's throwaway namespace when ``GOBRAVE_KUBE_REAL=1`` and ``KUBECONFIG`` are set.

What the emulator serves (``/api/v1``; ``server.py``)
- Namespaces (cluster-wide, each with its ``default`` ServiceAccount) and, in a
  namespace, Pods (with ``status`` and ``log``), Secrets, PersistentVolumeClaims, Events,
  ResourceQuotas, ServiceAccounts: create (409 AlreadyExists; ``generateName``;
  ``dryRun=All``), get (404 NotFound), list and watch with label selectors (``=``,
  ``!=``, ``in``, ``notin``, ``key``, ``!key``) and field selectors (``metadata.name`` and
  the fields the API indexes, ``selectors.FIELDS``), lists in chunks (``limit``,
  ``continue``), update (409 Conflict on a stale
  ``resourceVersion``), patch (merge and strategic merge; ``patches.py``), delete (with
  ``gracePeriodSeconds``) and deletecollection.
- ``resourceVersion``: one global counter, written on every object it changes; a bounded
  history of changes (``Emulator.set_history_limit``) from which a watch resumes, in
  order, with ADDED/MODIFIED/DELETED (an object entering or leaving a selector is ADDED or
  DELETED), ``timeoutSeconds``, ``allowWatchBookmarks`` (one BOOKMARK at the timeout), and
  an ERROR event with code 410 (Expired) for a version older than the history.
- Checks (``validation.py``): DNS-1123 names, label keys and values, a Pod's containers
  (name and image), a claim's access modes and size: 422 Invalid with the causes.
  ResourceQuota admission (``quota.py``): 403 "exceeded quota", and "must specify" for a
  compute quota the Pod does not request. Pod Security admission (``podsecurity.py``) in
  a namespace labelled ``pod-security.kubernetes.io/enforce``: 403 "violates PodSecurity".
  A body that is not an object of the right shape answers 400, never 500.
- ``pods/log``: ``container``, ``tailLines``, ``sinceSeconds``, ``timestamps``,
  ``limitBytes``, ``follow`` (new lines as written, until the container ends); 400 while
  the container waits to start, 500 when its node is lost.
- ``metrics.k8s.io/v1beta1`` PodMetrics (get, list) for running Pods with a usage rule,
  and the group's discovery; ``Emulator.serve_metrics(False)``: a cluster without
  metrics-server (every path of the group answers 404).
- Faults on demand: ``Emulator.drop_watches()`` (every open watch ends),
  ``Emulator.outage()`` (every request answers 503 meanwhile).
- Errors are ``Status`` bodies (``status.py``); every authenticated request is recorded
  as ``Call(verb, resource, subresource, namespace, group)`` in RBAC's words
  (``Emulator.calls``); ``rbac.uncovered(calls, role)`` lists those a Role does not grant.

What it does not do
- No other resources or API groups (Deployments, NetworkPolicies, ...), no discovery
  beyond ``/version``, ``/api``, ``/api/v1`` and ``/apis/metrics.k8s.io/v1beta1``, no
  RBAC (the token is all-powerful; check ``calls`` against a Role), no admission but
  quotas and Pod Security, no JSON Patch (415), no server-side apply, no ``$patch``
  directives, no immutable-field checks but a Pod's spec, no ``status.used`` on quotas,
  no finalizers, no owner references or garbage collection, no list ``limit``/``continue``
  and no list at an older ``resourceVersion`` (a list is always of now).
- The kubelet has one node and no restarts (``restartPolicy`` is not acted on), stops a
  deleted Pod's containers at once (the grace period is accepted, not waited out), runs
  no init containers or probes, and never pulls anything: an image is "present" unless a
  rule says otherwise.
"""
