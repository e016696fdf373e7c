# Fornace execution plans for Windows units: helpers every plan uses.
#
# The agent dot-sources the scripts a plan names and calls each command's
# function with the plan's arguments splatted (-Name value), with
# $ErrorActionPreference = 'Stop': any error ends the command as a failure
# whose message reaches the workflow.  What a function writes to the output
# becomes the command's result lines, so functions return short, readable
# lines and never a password.  They are idempotent where Windows allows: a
# plan sent again (a later deployment, a retry) finds the work done and says
# so.

function Write-FornaceLog {
    # One line in C:\Fornace\plans.log (never give it a password).
    param([String] $Message)
    $folder = 'C:\Fornace'
    if (-not (Test-Path -Path $folder)) {
        New-Item -ItemType Directory -Path $folder -Force | Out-Null
    }
    $stamp = Get-Date -Format 'yyyy-MM-dd HH:mm:ss'
    Add-Content -Path (Join-Path $folder 'plans.log') -Value "$stamp $Message"
}

function Test-FornaceValue {
    # Whether a plan argument was given: not null, not empty, and not a
    # placeholder such as "$saPassword" that the workflow left unsubstituted
    # because it had no value for it.
    param([Object] $Value)
    if ($null -eq $Value) { return $false }
    $text = [String] $Value
    if ($text -eq '') { return $false }
    return -not ($text -match '^\$[A-Za-z_][A-Za-z0-9_]*$')
}

function ConvertTo-FornaceFlag {
    # A plan argument as a boolean: JSON true/false, or "true"/"yes"/"1".
    param([Object] $Value)
    if ($Value -is [Boolean]) { return $Value }
    if (-not (Test-FornaceValue $Value)) { return $false }
    return @('true', 'yes', 'on', '1') -contains ([String] $Value).Trim().ToLowerInvariant()
}

function Get-FornaceNetBiosName {
    # The NetBIOS name Fornace gives a domain: its first label, upper case,
    # at most 15 characters (acme.local -> ACME).
    param([Parameter(Mandatory = $true)] [String] $DomainName)
    $label = ($DomainName.Split('.')[0] -replace '[^A-Za-z0-9-]', '').ToUpperInvariant()
    if ($label.Length -gt 15) { $label = $label.Substring(0, 15) }
    return $label
}

function Get-FornaceAccountName {
    # DOMAIN\user for a user name given as "user", "DOMAIN\user" or "user@domain".
    param([Parameter(Mandatory = $true)] [String] $UserName, [String] $DomainName = '')
    if ($UserName.Contains('\') -or $UserName.Contains('@')) { return $UserName }
    if (Test-FornaceValue $DomainName) {
        return '{0}\{1}' -f (Get-FornaceNetBiosName -DomainName $DomainName), $UserName
    }
    return $UserName
}

function New-FornaceCredential {
    param(
        [Parameter(Mandatory = $true)] [String] $UserName,
        [Parameter(Mandatory = $true)] [String] $Password,
        [String] $DomainName = ''
    )
    if (-not (Test-FornaceValue $Password)) { throw "no password given for $UserName" }
    $secure = ConvertTo-SecureString -String $Password -AsPlainText -Force
    $account = Get-FornaceAccountName -UserName $UserName -DomainName $DomainName
    return New-Object -TypeName System.Management.Automation.PSCredential -ArgumentList $account, $secure
}

function Get-FornaceComputerSystem {
    return Get-CimInstance -ClassName Win32_ComputerSystem
}

function Get-FornaceCurrentDomain {
    # The DNS name of the domain this computer belongs to, '' in a workgroup.
    $system = Get-FornaceComputerSystem
    if ($system.PartOfDomain) { return [String] $system.Domain }
    return ''
}

function Get-FornaceDomainRole {
    # Win32_ComputerSystem.DomainRole: 2 standalone server, 3 member server,
    # 4 backup domain controller, 5 primary domain controller.
    return [Int32] (Get-FornaceComputerSystem).DomainRole
}

function Install-FornaceFeature {
    # Installs the Windows features not installed yet; returns $true when
    # Windows asks for a restart.
    param(
        [Parameter(Mandatory = $true)] [String[]] $Name,
        [String] $Source = ''
    )
    $missing = @(Get-WindowsFeature -Name $Name |
        Where-Object { -not $_.Installed } |
        ForEach-Object { $_.Name })
    if ($missing.Count -eq 0) { return $false }
    $arguments = @{ Name = $missing; IncludeManagementTools = $true }
    if (Test-FornaceValue $Source) { $arguments['Source'] = $Source }
    $result = Install-WindowsFeature @arguments
    if (-not $result.Success) {
        throw "installing $($missing -join ', ') failed (exit code $($result.ExitCode))"
    }
    Write-FornaceLog "features installed: $($missing -join ', ')"
    return ([String] $result.RestartNeeded -eq 'Yes')
}

function Enable-FornaceFirewallPort {
    # An inbound firewall rule for a TCP port (created once, named after it).
    param(
        [Parameter(Mandatory = $true)] [Int32] $Port,
        [Parameter(Mandatory = $true)] [String] $Description
    )
    $name = "Fornace-TCP-$Port"
    if (-not (Get-NetFirewallRule -Name $name -ErrorAction SilentlyContinue)) {
        New-NetFirewallRule -Name $name -DisplayName "Fornace: $Description (TCP $Port)" `
            -Direction Inbound -Protocol TCP -LocalPort $Port -Action Allow | Out-Null
    }
}

function Set-FornaceLocalAdminPassword {
    # The password of a local account (the built-in Administrator by default),
    # which is also enabled and set never to expire.
    param(
        [String] $UserName = 'Administrator',
        [Parameter(Mandatory = $true)] [String] $Password
    )
    if (-not (Test-FornaceValue $Password)) { throw 'no password given' }
    if (Get-Command -Name Set-LocalUser -ErrorAction SilentlyContinue) {
        $secure = ConvertTo-SecureString -String $Password -AsPlainText -Force
        Set-LocalUser -Name $UserName -Password $secure -PasswordNeverExpires $true
        Enable-LocalUser -Name $UserName
    } else {
        # Windows Server 2012 R2 and older: no LocalAccounts module
        $account = [ADSI] "WinNT://$env:COMPUTERNAME/$UserName,user"
        $account.SetPassword($Password)
        $account.SetInfo()
    }
    Write-FornaceLog "password of local user $UserName set"
    "password of local user $UserName set"
}
