# Fornace benchmark: Active Directory steps.

function Install-BenchPrimaryDomainController {
    param([String] $DomainName, [String] $SafeModePassword)
    Install-WindowsFeature AD-Domain-Services -IncludeManagementTools | Out-Null
    $secure = ConvertTo-SecureString $SafeModePassword -AsPlainText -Force
    Install-ADDSForest -DomainName $DomainName -SafeModeAdministratorPassword $secure `
        -InstallDns -NoRebootOnCompletion -Force | Out-Null
    Write-BenchLog "forest $DomainName created"
}

function Get-BenchDnsAddress {
    # The IPv4 address clients of the new domain use as their DNS server.
    Get-NetIPAddress -AddressFamily IPv4 |
        Where-Object { $_.InterfaceAlias -notlike 'Loopback*' } |
        Select-Object -First 1 -ExpandProperty IPAddress
}

function Join-BenchDomain {
    param([String] $DomainName, [String] $UserName, [String] $Password, [String] $DnsServer)
    Get-NetAdapter | Where-Object Status -eq 'Up' |
        Set-DnsClientServerAddress -ServerAddresses $DnsServer
    $secure = ConvertTo-SecureString $Password -AsPlainText -Force
    $credential = New-Object PSCredential("$DomainName\$UserName", $secure)
    Add-Computer -DomainName $DomainName -Credential $credential -Force
    Write-BenchLog "joined domain $DomainName"
}

function Install-BenchSecondaryDomainController {
    param([String] $DomainName, [String] $UserName, [String] $Password, [String] $SafeModePassword)
    Install-WindowsFeature AD-Domain-Services -IncludeManagementTools | Out-Null
    $secure = ConvertTo-SecureString $Password -AsPlainText -Force
    $credential = New-Object PSCredential("$DomainName\$UserName", $secure)
    $safeMode = ConvertTo-SecureString $SafeModePassword -AsPlainText -Force
    Install-ADDSDomainController -DomainName $DomainName -Credential $credential `
        -SafeModeAdministratorPassword $safeMode -InstallDns -NoRebootOnCompletion -Force | Out-Null
    Write-BenchLog "replica domain controller of $DomainName installed"
}
