# Fornace execution plans for Windows units: IIS and ASP.NET applications
# deployed from a git repository.  Needs WindowsCore.ps1.

function Install-FornaceIIS {
    # IIS with ASP.NET 4.x, started and reachable on port 80.
    param(
        [String[]] $Features = @('Web-Server', 'Web-WebServer', 'Web-Default-Doc', 'Web-Static-Content',
                                 'Web-Http-Errors', 'Web-Http-Logging', 'Web-Request-Monitor',
                                 'Web-Filtering', 'Web-Net-Ext45', 'Web-Asp-Net45',
                                 'Web-ISAPI-Ext', 'Web-ISAPI-Filter', 'Web-Mgmt-Console')
    )
    $restart = Install-FornaceFeature -Name $Features
    Set-Service -Name W3SVC -StartupType Automatic
    Start-Service -Name W3SVC
    Enable-FornaceFirewallPort -Port 80 -Description 'HTTP'
    if ($restart) { return 'IIS installed; Windows asks for a restart' }
    'IIS installed'
}

function Get-FornaceGit {
    # git.exe: installed, or MinGit unpacked under C:\Fornace\MinGit.
    param([String] $ArchiveUrl = 'https://github.com/git-for-windows/git/releases/download/v2.45.2.windows.1/MinGit-2.45.2-64-bit.zip')
    $command = Get-Command -Name git.exe -ErrorAction SilentlyContinue
    if ($command) { return $command.Source }
    foreach ($candidate in @("$env:ProgramFiles\Git\cmd\git.exe", 'C:\Fornace\MinGit\cmd\git.exe')) {
        if (Test-Path -Path $candidate) { return $candidate }
    }
    [Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12
    $archive = Join-Path $env:TEMP 'MinGit.zip'
    Invoke-WebRequest -Uri $ArchiveUrl -OutFile $archive -UseBasicParsing
    Expand-Archive -Path $archive -DestinationPath 'C:\Fornace\MinGit' -Force
    Remove-Item -Path $archive -Force
    Write-FornaceLog 'MinGit installed in C:\Fornace\MinGit'
    return 'C:\Fornace\MinGit\cmd\git.exe'
}

function Invoke-FornaceGit {
    # Runs git; a non-zero exit is an error naming the git command only (a
    # repository URL may carry credentials).
    param(
        [Parameter(Mandatory = $true)] [String] $Git,
        [Parameter(Mandatory = $true)] [String[]] $Arguments
    )
    $output = & $Git @Arguments 2>&1 | ForEach-Object { [String] $_ }
    if ($LASTEXITCODE -ne 0) {
        $verb = @($Arguments | Where-Object { $_ -notlike '-*' })[0]
        throw "git $verb failed with exit code ${LASTEXITCODE}"
    }
    return $output
}

function Deploy-FornaceWebApp {
    # Clones (or updates) the application's repository and serves it as an
    # IIS site with its own application pool (.NET 4, integrated pipeline).
    # The site's folder is the one of the shallowest web.config in the
    # repository, or its root.  Another site holding the port is stopped.
    param(
        [Parameter(Mandatory = $true)] [String] $Repository,
        [Parameter(Mandatory = $true)] [String] $SiteName,
        [Int32] $Port = 80,
        [String] $Root = 'C:\inetpub\fornace'
    )
    Import-Module WebAdministration
    $git = Get-FornaceGit
    $folderName = $SiteName -replace '[^A-Za-z0-9_.-]', '_'
    $path = Join-Path $Root $folderName
    $previous = $ErrorActionPreference
    $ErrorActionPreference = 'Continue'   # git writes progress on stderr
    try {
        if (Test-Path -Path (Join-Path $path '.git')) {
            Invoke-FornaceGit -Git $git -Arguments @('-C', $path, 'remote', 'set-url', 'origin', $Repository) | Out-Null
            Invoke-FornaceGit -Git $git -Arguments @('-C', $path, 'fetch', '--quiet', '--depth', '1', 'origin') | Out-Null
            Invoke-FornaceGit -Git $git -Arguments @('-C', $path, 'reset', '--quiet', '--hard', 'FETCH_HEAD') | Out-Null
        } else {
            if (Test-Path -Path $path) { Remove-Item -Path $path -Recurse -Force }
            New-Item -ItemType Directory -Path $Root -Force | Out-Null
            Invoke-FornaceGit -Git $git -Arguments @('clone', '--quiet', '--depth', '1', $Repository, $path) | Out-Null
        }
    } finally {
        $ErrorActionPreference = $previous
    }
    $webConfig = Get-ChildItem -Path $path -Filter 'web.config' -Recurse -File |
        Where-Object { $_.FullName -notlike '*\.git\*' } |
        Sort-Object -Property { $_.FullName.Length } |
        Select-Object -First 1
    $content = $path
    if ($webConfig) { $content = $webConfig.DirectoryName }
    & icacls.exe $path /grant 'IIS_IUSRS:(OI)(CI)RX' /T /Q | Out-Null

    $pool = "IIS:\AppPools\$folderName"
    if (-not (Test-Path -Path $pool)) { New-WebAppPool -Name $folderName | Out-Null }
    Set-ItemProperty -Path $pool -Name managedRuntimeVersion -Value 'v4.0'
    Set-ItemProperty -Path $pool -Name managedPipelineMode -Value 'Integrated'

    Get-Website | Where-Object {
        $_.Name -ne $SiteName -and $_.State -eq 'Started' -and
        @($_.Bindings.Collection | Where-Object { $_.bindingInformation -like "*:${Port}:*" }).Count -gt 0
    } | ForEach-Object { Stop-Website -Name $_.Name }

    $site = "IIS:\Sites\$SiteName"
    if (Test-Path -Path $site) {
        Set-ItemProperty -Path $site -Name physicalPath -Value $content
        Set-ItemProperty -Path $site -Name applicationPool -Value $folderName
    } else {
        New-Website -Name $SiteName -Port $Port -PhysicalPath $content -ApplicationPool $folderName | Out-Null
    }
    Start-Website -Name $SiteName
    Enable-FornaceFirewallPort -Port $Port -Description "site $SiteName"
    Write-FornaceLog "application $SiteName deployed in $content"
    "application $SiteName deployed in $content, port $Port"
}
