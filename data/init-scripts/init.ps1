# Boot script of a Windows unit: write the agent configuration, set the
# hostname and start the agent service.
$ErrorActionPreference = 'Stop'
$configDir = 'C:\Fornace'
New-Item -ItemType Directory -Force -Path $configDir | Out-Null
$config = [System.Convert]::FromBase64String('%AGENT_CONFIG_BASE64%')
[System.IO.File]::WriteAllBytes((Join-Path $configDir 'agent.conf'), $config)
if ($env:COMPUTERNAME -ne '%INTERNAL_HOSTNAME%') {
    Rename-Computer -NewName '%INTERNAL_HOSTNAME%' -Force
}
Set-Content -Path (Join-Path $configDir 'server') -Value '%MURANO_SERVER_ADDRESS%'
Start-Service -Name 'FornaceAgent'
