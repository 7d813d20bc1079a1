#!/usr/bin/env bash
# corelog with ACLs on, for an A/B of what authorization costs on the produce and fetch
# paths: give it to benches/ab.py as the B binary, the plain broker as A.
#
#   python3 benches/ab.py --a target/release/corelog --b benches/acl_broker.sh \
#       --only W1,W7 --rounds 2 --label-a plain --label-b acls
#
# The broker (CORELOG_ACL_REAL_BIN, default target/release/corelog) runs with Kafka's
# StandardAuthorizer and allow.everyone.if.no.acl.found, so the load generator (which
# connects as User:ANONYMOUS) may create its ACLs; once the broker listens, ACLs are
# added that make every request take the whole decision path: ANONYMOUS allowed ALL on
# the LITERAL wildcard of topics, groups and the cluster (a match found after the
# literal lookup), and a PREFIXED DENY for another principal (so the prefix lookups run
# too). Requests before the ACLs land are allowed by the no-ACL default; either way none
# is refused, so both sides do the same work but for the checks.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
real="${CORELOG_ACL_REAL_BIN:-$here/../target/release/corelog}"

listen=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    if [[ "${args[$i]}" == "--listen" ]]; then listen="${args[$((i + 1))]}"; fi
done

config="$(mktemp --suffix=.toml)"
cat >"$config" <<'EOF'
"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"allow.everyone.if.no.acl.found" = true
EOF

if [[ -n "$listen" ]]; then
    python3 - "$listen" <<'EOF' >/dev/null 2>&1 &
import sys, time
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
acl = lambda t, name, pattern, who, op, perm: AclBinding(t, name, pattern, who, "*", op, perm)
bindings = [
    acl(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:ANONYMOUS",
        AclOperation.ALL, AclPermissionType.ALLOW),
    acl(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:ANONYMOUS",
        AclOperation.ALL, AclPermissionType.ALLOW),
    acl(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS",
        AclOperation.ALL, AclPermissionType.ALLOW),
    acl(ResourceType.TOPIC, "w", ResourcePatternType.PREFIXED, "User:someone-else",
        AclOperation.WRITE, AclPermissionType.DENY),
]
deadline = time.time() + 60
while time.time() < deadline:
    try:
        for f in admin.create_acls(bindings).values():
            f.result(10)
        break
    except Exception:
        time.sleep(0.5)
EOF
fi
exec "$real" "$@" --config "$config"
