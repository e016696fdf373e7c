# Fornace execution plans for Windows units: Active Directory (domain
# controllers) and domain membership.  Needs WindowsCore.ps1.

function Set-FornaceDomainAdminPassword {
    # On the future primary domain controller: its local Administrator
    # becomes the domain Administrator when the forest is created, with the
    # password it has then.
    param([Parameter(Mandatory = $true)] [String] $Password)
    if ((Get-FornaceDomainRole) -ge 4) {
        # already a domain controller: the domain Administrator's password
        Import-Module ActiveDirectory
        $secure = ConvertTo-SecureString -String $Password -AsPlainText -Force
        Set-ADAccountPassword -Identity 'Administrator' -NewPassword $secure -Reset
        Write-FornaceLog 'password of the domain Administrator set'
        return 'domain administrator password set'
    }
    Set-FornaceLocalAdminPassword -UserName 'Administrator' -Password $Password | Out-Null
    'domain administrator password set (local Administrator of the future domain controller)'
}

function Install-FornacePrimaryDomainController {
    # A new forest whose first domain controller (and DNS server) is this
    # server.  A restart completes it (the plan asks for one).
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Parameter(Mandatory = $true)] [String] $SafeModePassword,
        [String] $NetBiosName = ''
    )
    if ((Get-FornaceDomainRole) -ge 4) {
        $current = Get-FornaceCurrentDomain
        if ($current -ne $DomainName) {
            throw "this server is already a domain controller of $current"
        }
        return "already the domain controller of $DomainName"
    }
    if (Get-FornaceCurrentDomain) {
        throw "this server is a member of domain $(Get-FornaceCurrentDomain); it cannot create a forest"
    }
    Install-FornaceFeature -Name 'AD-Domain-Services', 'DNS' | Out-Null
    Import-Module ADDSDeployment
    if (-not (Test-FornaceValue $NetBiosName)) {
        $NetBiosName = Get-FornaceNetBiosName -DomainName $DomainName
    }
    $safeMode = ConvertTo-SecureString -String $SafeModePassword -AsPlainText -Force
    Install-ADDSForest -DomainName $DomainName -DomainNetbiosName $NetBiosName `
        -SafeModeAdministratorPassword $safeMode -InstallDns `
        -NoRebootOnCompletion -Force -WarningAction SilentlyContinue | Out-Null
    Write-FornaceLog "forest $DomainName created"
    "forest $DomainName created; the restart completes it"
}

function Wait-FornaceDirectoryServices {
    # After the restart of a new domain controller: wait until its directory
    # and DNS services run.
    param([Int32] $TimeoutSeconds = 900)
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    foreach ($service in 'NTDS', 'DNS', 'Netlogon') {
        while ((Get-Service -Name $service -ErrorAction SilentlyContinue).Status -ne 'Running') {
            if ((Get-Date) -gt $deadline) { throw "service $service is not running" }
            Start-Sleep -Seconds 10
        }
    }
}

function Get-FornaceDnsAddress {
    # The IPv4 address of this domain controller, the DNS server of the
    # domain's members.
    Wait-FornaceDirectoryServices
    $address = Get-NetIPAddress -AddressFamily IPv4 |
        Where-Object { $_.IPAddress -ne '127.0.0.1' -and $_.IPAddress -notlike '169.254.*' } |
        Sort-Object -Property InterfaceIndex |
        Select-Object -First 1 -ExpandProperty IPAddress
    if (-not $address) { throw 'this server has no IPv4 address' }
    $address
}

function Set-FornaceDnsServer {
    # The DNS servers of every connected network adapter.
    param([Parameter(Mandatory = $true)] [String[]] $Address)
    Get-NetAdapter | Where-Object { $_.Status -eq 'Up' } | ForEach-Object {
        Set-DnsClientServerAddress -InterfaceIndex $_.ifIndex -ServerAddresses $Address
    }
    Clear-DnsClientCache
}

function Wait-FornaceDomain {
    # Until the domain's controllers can be found through DNS.
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Int32] $TimeoutSeconds = 600
    )
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while ($true) {
        try {
            Resolve-DnsName -Name "_ldap._tcp.dc._msdcs.$DomainName" -Type SRV -ErrorAction Stop | Out-Null
            return
        } catch {
            if ((Get-Date) -gt $deadline) {
                throw "no domain controller of $DomainName found through DNS: $($_.Exception.Message)"
            }
            Start-Sleep -Seconds 10
        }
    }
}

function Join-FornaceDomain {
    # Joins the domain, using its domain controller as DNS server.  A restart
    # completes it (the plan asks for one).
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Parameter(Mandatory = $true)] [String] $Password,
        [Parameter(Mandatory = $true)] [String] $DnsServer,
        [String] $UserName = 'Administrator',
        [String] $Hostname = ''
    )
    Set-FornaceDnsServer -Address $DnsServer
    $current = Get-FornaceCurrentDomain
    if ($current -eq $DomainName) { return "already a member of $DomainName" }
    if ($current) { throw "this computer is a member of $current; it must leave it first" }
    Wait-FornaceDomain -DomainName $DomainName
    $credential = New-FornaceCredential -UserName $UserName -Password $Password -DomainName $DomainName
    $arguments = @{ DomainName = $DomainName; Credential = $credential; Force = $true }
    if ((Test-FornaceValue $Hostname) -and $env:COMPUTERNAME -ne $Hostname) {
        # the boot script renamed the computer, effective at the next restart:
        # join under that name (Add-Computer sets JoinWithNewName for it)
        $arguments['NewName'] = $Hostname
    }
    Add-Computer @arguments -WarningAction SilentlyContinue
    Write-FornaceLog "joined domain $DomainName"
    "joined domain $DomainName; the restart completes it"
}

function Remove-FornaceDomainMembership {
    # Leaves the domain for a workgroup.  With the domain's credentials the
    # computer account is disabled in the directory; without them (the
    # domain's service is gone) the computer only leaves.
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [String] $UserName = 'Administrator',
        [String] $Password = '',
        [String] $Workgroup = 'WORKGROUP'
    )
    $current = Get-FornaceCurrentDomain
    if (-not $current) { return 'not a member of any domain' }
    if ($current -ne $DomainName) { throw "this computer is a member of $current, not of $DomainName" }
    if (Test-FornaceValue $Password) {
        $credential = New-FornaceCredential -UserName $UserName -Password $Password -DomainName $DomainName
        Remove-Computer -UnjoinDomainCredential $credential -WorkgroupName $Workgroup -Force `
            -WarningAction SilentlyContinue
    } else {
        $system = Get-FornaceComputerSystem
        $result = Invoke-CimMethod -InputObject $system -MethodName UnjoinDomainOrWorkgroup `
            -Arguments @{ FUnjoinOptions = [UInt32] 0 }
        if ($result.ReturnValue -ne 0) {
            throw "leaving domain $DomainName failed (error $($result.ReturnValue))"
        }
        $result = Invoke-CimMethod -InputObject $system -MethodName JoinDomainOrWorkgroup `
            -Arguments @{ Name = $Workgroup }
        if ($result.ReturnValue -ne 0) {
            throw "joining workgroup $Workgroup failed (error $($result.ReturnValue))"
        }
    }
    Get-NetAdapter | Where-Object { $_.Status -eq 'Up' } | ForEach-Object {
        Set-DnsClientServerAddress -InterfaceIndex $_.ifIndex -ResetServerAddresses
    }
    Write-FornaceLog "left domain $DomainName"
    "left domain $DomainName; the restart completes it"
}

function Install-FornaceSecondaryDomainController {
    # Promotes this member of the domain to an additional domain controller
    # (and DNS server).  A restart completes it (the plan asks for one).
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Parameter(Mandatory = $true)] [String] $Password,
        [Parameter(Mandatory = $true)] [String] $SafeModePassword,
        [String] $UserName = 'Administrator'
    )
    if ((Get-FornaceDomainRole) -ge 4) {
        return "already a domain controller of $(Get-FornaceCurrentDomain)"
    }
    Install-FornaceFeature -Name 'AD-Domain-Services', 'DNS' | Out-Null
    Import-Module ADDSDeployment
    $credential = New-FornaceCredential -UserName $UserName -Password $Password -DomainName $DomainName
    $safeMode = ConvertTo-SecureString -String $SafeModePassword -AsPlainText -Force
    Install-ADDSDomainController -DomainName $DomainName -Credential $credential `
        -SafeModeAdministratorPassword $safeMode -InstallDns `
        -NoRebootOnCompletion -Force -WarningAction SilentlyContinue | Out-Null
    Write-FornaceLog "domain controller of $DomainName installed"
    "domain controller of $DomainName installed; the restart completes it"
}
