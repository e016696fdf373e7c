# Fornace benchmark: helpers shared by every execution plan.

function Write-BenchLog {
    param([String] $Message)
    $stamp = Get-Date -Format 'yyyy-MM-dd HH:mm:ss'
    Add-Content -Path 'C:\Fornace\Agent\plans.log' -Value "$stamp $Message"
}

function Set-LocalAdministratorPassword {
    param(
        [String] $UserName = 'Administrator',
        [String] $Password
    )
    if (-not $Password) { throw 'Set-LocalAdministratorPassword: no password given' }
    $account = [ADSI]"WinNT://$env:COMPUTERNAME/$UserName,user"
    $account.SetPassword($Password)
    $account.SetInfo()
    Write-BenchLog "password of local user $UserName changed"
}
