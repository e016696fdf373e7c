#!/bin/sh
# Boot script of a Linux unit: write the agent configuration and start it.
# FORNACE_ETC (default /etc/fornace) and FORNACE_AGENT_WORK_DIR (default: the
# agent's [agent] work_dir) let the local cloud run it inside a sandbox;
# FORNACE_SET_HOSTNAME=0 leaves the host name alone there.
set -eu
etc="${FORNACE_ETC:-/etc/fornace}"
mkdir -p "$etc"
echo '%AGENT_CONFIG_BASE64%' | base64 -d > "$etc/agent.conf"
if [ "${FORNACE_SET_HOSTNAME:-1}" != 0 ]; then
    hostname '%INTERNAL_HOSTNAME%' 2>/dev/null || true
fi
echo '%MURANO_SERVER_ADDRESS%' > "$etc/server"
exec fornace --config-file "$etc/agent.conf" agent \
    ${FORNACE_AGENT_WORK_DIR:+--work-dir "$FORNACE_AGENT_WORK_DIR"}
