#!/bin/sh
# Boot script of a Linux unit: write the agent configuration and start it.
set -eu
mkdir -p /etc/fornace
echo '%AGENT_CONFIG_BASE64%' | base64 -d > /etc/fornace/agent.conf
hostname '%INTERNAL_HOSTNAME%' 2>/dev/null || true
echo '%MURANO_SERVER_ADDRESS%' > /etc/fornace/server
exec fornace agent --config-file /etc/fornace/agent.conf
