#ps1_sysnative
# Fornace benchmark boot script: writes the agent configuration and names the host.
$ErrorActionPreference = 'Stop'
$AgentDir = 'C:\Fornace\Agent'
$ConfigBase64 = '%AGENT_CONFIG_BASE64%'
$NewHostname = '%INTERNAL_HOSTNAME%'

New-Item -ItemType Directory -Force -Path $AgentDir | Out-Null
[IO.File]::WriteAllBytes("$AgentDir\fornace.agent.config", [Convert]::FromBase64String($ConfigBase64))
if ($NewHostname -and $env:COMPUTERNAME -ne $NewHostname) {
    Rename-Computer -NewName $NewHostname -Force
    Restart-Computer -Force
}
