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
# The agent's exit code says what comes next, as an init system would act on
# it: 3 is a reboot (or a restart for an incomplete plan), after which the
# agent runs again -- in the local cloud a reboot of the unit is this restart;
# 0 stopped, 4 powered off, 5 stopped by a plan and 2 bad configuration end
# the unit's agent; anything else is a crash (killed, a bug): the agent is
# started again after a second -- its journal answers a plan it had already
# finished -- unless it crashed 5 times within 60 seconds.
crashes=""
while :; do
    code=0
    fornace --config-file "$etc/agent.conf" agent \
        ${FORNACE_AGENT_WORK_DIR:+--work-dir "$FORNACE_AGENT_WORK_DIR"} || code=$?
    case "$code" in
        3)
            echo "init.sh: the agent exited with code 3 (reboot); starting it again" >&2
            continue ;;
        0|2|4|5)
            echo "init.sh: the agent exited with code $code; it is not started again" >&2
            exit "$code" ;;
    esac
    now=$(cut -d. -f1 /proc/uptime)   # seconds since boot
    recent=""
    for t in $crashes; do
        [ $((now - t)) -lt 60 ] && recent="$recent $t"
    done
    crashes="$recent $now"
    if [ "$(echo $crashes | wc -w)" -ge 5 ]; then
        echo "init.sh: the agent crashed 5 times within 60 s (last code $code); it is not started again" >&2
        exit "$code"
    fi
    echo "init.sh: the agent crashed (code $code); starting it again" >&2
    sleep 1
done
