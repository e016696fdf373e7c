# Fornace execution plans for Windows units: the lifecycle operations of the
# type catalog (data/types.json) -- check, stop, start and restart what a
# unit's role runs.  Needs WindowsCore.ps1.
#
# What a role runs is given by the operation's inputs, not known here:
# -Services, the Windows services in start order (DNS, NTDS... on a domain
# controller; WAS, W3SVC for IIS; MSSQLSERVER, SQLSERVERAGENT for SQL
# Server), -Ports, TCP ports that must accept connections on this computer,
# and -Sites, IIS sites.  A list argument the workflow left as a "$name"
# placeholder counts as empty.

function Get-FornaceListArgument {
    # The given items of a list argument, as strings (null, '' and "$name"
    # placeholders dropped).
    param([Object[]] $Value)
    return @($Value | Where-Object { Test-FornaceValue $_ } | ForEach-Object { [String] $_ })
}

function Get-FornaceServiceState {
    # State (Running, Stopped...) and start mode (Auto, Manual, Disabled) of
    # a Windows service; $null when it is not installed.
    param([Parameter(Mandatory = $true)] [String] $Name)
    $service = Get-Service -Name $Name -ErrorAction SilentlyContinue
    if (-not $service) { return $null }
    $filter = "Name='{0}'" -f ($service.Name -replace "'", "\'")
    $details = Get-CimInstance -ClassName Win32_Service -Filter $filter
    return [PSCustomObject] @{ Name = $service.Name; State = [String] $service.Status; StartMode = [String] $details.StartMode }
}

function Get-FornaceHttpStatus {
    # The HTTP status a URL answers with (redirects not followed), or 0 and
    # why there was no answer.
    param(
        [Parameter(Mandatory = $true)] [String] $Url,
        [String] $HostName = '',
        [Int32] $TimeoutSeconds = 5
    )
    $request = [Net.HttpWebRequest]::Create($Url)
    $request.AllowAutoRedirect = $false
    $request.Timeout = $TimeoutSeconds * 1000
    if (Test-FornaceValue $HostName) { $request.Host = $HostName }
    try {
        $response = $request.GetResponse()
        $status = [Int32] $response.StatusCode
        $response.Close()
        return [PSCustomObject] @{ Status = $status; Problem = '' }
    } catch {
        $failure = $_.Exception
        while ($failure -and -not ($failure -is [Net.WebException])) { $failure = $failure.InnerException }
        if ($failure -and $failure.Response) {
            $status = [Int32] $failure.Response.StatusCode
            $failure.Response.Close()
            return [PSCustomObject] @{ Status = $status; Problem = '' }
        }
        return [PSCustomObject] @{ Status = 0; Problem = $_.Exception.Message }
    }
}

function New-FornaceFinding {
    # One finding of a check: Level 'ok', 'warning' or 'error', and a text.
    param([Parameter(Mandatory = $true)] [String] $Level, [Parameter(Mandatory = $true)] [String] $Text)
    return [PSCustomObject] @{ Level = $Level; Text = $Text }
}

function Get-FornaceSiteHealth {
    # The findings about one IIS site: error when it is missing or stopped,
    # its application pool is not started or it gives no answer on one of
    # its http bindings (probed on localhost); warning when it answers HTTP
    # 4xx/5xx.
    param(
        [Parameter(Mandatory = $true)] [String] $Name,
        [Int32] $TimeoutSeconds = 5
    )
    $site = Get-Website | Where-Object { $_.Name -eq $Name }
    if (-not $site) { return New-FornaceFinding -Level error -Text "site $Name does not exist" }
    if ($site.State -ne 'Started') { return New-FornaceFinding -Level error -Text "site $Name is $($site.State)" }
    $pool = [String] $site.applicationPool
    if ($pool) {
        $poolState = [String] (Get-WebAppPoolState -Name $pool).Value
        if ($poolState -ne 'Started') {
            return New-FornaceFinding -Level error -Text "application pool $pool of site $Name is $poolState"
        }
    }
    $bindings = @($site.Bindings.Collection | Where-Object { $_.protocol -eq 'http' })
    if ($bindings.Count -eq 0) { return New-FornaceFinding -Level ok -Text "site $Name is started (no http binding to probe)" }
    foreach ($binding in $bindings) {
        # bindingInformation is "address:port:host name"
        $parts = ([String] $binding.bindingInformation).Split(':')
        $port = $parts[$parts.Count - 2]
        $hostName = $parts[$parts.Count - 1]
        $answer = Get-FornaceHttpStatus -Url ('http://localhost:{0}/' -f $port) -HostName $hostName `
            -TimeoutSeconds $TimeoutSeconds
        if ($answer.Status -eq 0) {
            New-FornaceFinding -Level error -Text "site $Name gives no answer on port ${port}: $($answer.Problem)"
        } elseif ($answer.Status -ge 400) {
            New-FornaceFinding -Level warning -Text "site $Name answers HTTP $($answer.Status) on port $port"
        } else {
            New-FornaceFinding -Level ok -Text "site $Name answers HTTP $($answer.Status) on port $port"
        }
    }
}

function Test-FornaceUnitHealth {
    # One JSON line, {"status": "ok" | "degraded" | "error", "detail": "..."}.
    # error: a service is not installed or not running, a port does not
    # accept connections on this computer, a site is missing or stopped (or
    # its application pool), or gives no answer -- the command then fails
    # with that line as its message; degraded: all run, but a service would
    # not start with Windows (start mode not Auto) or a site answers HTTP
    # 4xx/5xx; ok otherwise.
    param(
        [Object[]] $Services = @(),
        [Object[]] $Ports = @(),
        [Object[]] $Sites = @(),
        [Int32] $TimeoutSeconds = 5
    )
    $errors = New-Object System.Collections.Generic.List[String]
    $warnings = New-Object System.Collections.Generic.List[String]
    $fine = New-Object System.Collections.Generic.List[String]
    $serviceNames = @(Get-FornaceListArgument $Services)
    $portNumbers = @(Get-FornaceListArgument $Ports)
    $siteNames = @(Get-FornaceListArgument $Sites)
    if ($serviceNames.Count + $portNumbers.Count + $siteNames.Count -eq 0) { throw 'nothing to check: no services, ports or sites given' }
    foreach ($name in $serviceNames) {
        $service = Get-FornaceServiceState -Name $name
        if (-not $service) {
            $errors.Add("service $name is not installed")
        } elseif ($service.State -ne 'Running') {
            $errors.Add("service $name is $($service.State)")
        } elseif ($service.StartMode -ne 'Auto') {
            $warnings.Add("service $name runs but its start mode is $($service.StartMode)")
        } else {
            $fine.Add("service $name runs")
        }
    }
    foreach ($port in $portNumbers) {
        $open = Test-NetConnection -ComputerName localhost -Port ([Int32] $port) -InformationLevel Quiet `
            -WarningAction SilentlyContinue
        if ($open) { $fine.Add("port $port accepts connections") }
        else { $errors.Add("port $port does not accept connections") }
    }
    if ($siteNames.Count -gt 0) {
        Import-Module WebAdministration
        foreach ($name in $siteNames) {
            foreach ($finding in @(Get-FornaceSiteHealth -Name $name -TimeoutSeconds $TimeoutSeconds)) {
                switch ($finding.Level) {
                    'error' { $errors.Add($finding.Text) }
                    'warning' { $warnings.Add($finding.Text) }
                    default { $fine.Add($finding.Text) }
                }
            }
        }
    }
    $status = 'ok'
    $details = $fine
    if ($errors.Count -gt 0) {
        $status = 'error'
        $details = @($errors) + @($warnings)
    } elseif ($warnings.Count -gt 0) {
        $status = 'degraded'
        $details = $warnings
    }
    $line = [ordered] @{ status = $status; detail = (@($details) -join '; ') } | ConvertTo-Json -Compress
    if ($status -eq 'error') { throw $line }
    return $line
}

function Stop-FornaceUnit {
    # Stops the sites (and their application pools, unless another started
    # site uses them), then the services in reverse start order (-Force:
    # services that depend on them stop too) and waits for them.  What is
    # stopped already stays so.
    param(
        [Object[]] $Services = @(),
        [Object[]] $Sites = @(),
        [Int32] $TimeoutSeconds = 120
    )
    $done = New-Object System.Collections.Generic.List[String]
    $siteNames = @(Get-FornaceListArgument $Sites)
    if ($siteNames.Count -gt 0) {
        Import-Module WebAdministration
        foreach ($name in $siteNames) {
            $site = Get-Website | Where-Object { $_.Name -eq $name }
            if (-not $site) { $done.Add("site $name does not exist"); continue }
            if ($site.State -eq 'Stopped') {
                $done.Add("site $name was stopped already")
            } else {
                Stop-Website -Name $name
                $done.Add("site $name stopped")
            }
            $pool = [String] $site.applicationPool
            $shared = @(Get-Website | Where-Object {
                $_.Name -ne $name -and $_.applicationPool -eq $pool -and $_.State -eq 'Started' })
            if ($pool -and $shared.Count -eq 0 -and (Get-WebAppPoolState -Name $pool).Value -eq 'Started') {
                Stop-WebAppPool -Name $pool
                $done.Add("application pool $pool stopped")
            }
        }
    }
    $serviceNames = @(Get-FornaceListArgument $Services)
    [Array]::Reverse($serviceNames)
    foreach ($name in $serviceNames) {
        $service = Get-Service -Name $name -ErrorAction SilentlyContinue
        if (-not $service) { $done.Add("service $name is not installed"); continue }
        if ($service.Status -eq 'Stopped') { $done.Add("service $name was stopped already"); continue }
        Stop-Service -Name $name -Force
        $service.WaitForStatus('Stopped', [TimeSpan]::FromSeconds($TimeoutSeconds))
        $done.Add("service $name stopped")
    }
    Write-FornaceLog ('stop: ' + (@($done) -join '; '))
    return @($done)
}

function Start-FornaceUnit {
    # Starts the services in start order and waits for them, then the sites'
    # application pools and the sites.  What runs already is left alone.
    param(
        [Object[]] $Services = @(),
        [Object[]] $Sites = @(),
        [Int32] $TimeoutSeconds = 120
    )
    $done = New-Object System.Collections.Generic.List[String]
    foreach ($name in @(Get-FornaceListArgument $Services)) {
        $service = Get-Service -Name $name -ErrorAction SilentlyContinue
        if (-not $service) { throw "service $name is not installed" }
        if ($service.Status -eq 'Running') { $done.Add("service $name was running already"); continue }
        Start-Service -Name $name
        $service.WaitForStatus('Running', [TimeSpan]::FromSeconds($TimeoutSeconds))
        $done.Add("service $name started")
    }
    $siteNames = @(Get-FornaceListArgument $Sites)
    if ($siteNames.Count -gt 0) {
        Import-Module WebAdministration
        foreach ($name in $siteNames) {
            $site = Get-Website | Where-Object { $_.Name -eq $name }
            if (-not $site) { throw "site $name does not exist" }
            $pool = [String] $site.applicationPool
            if ($pool -and (Get-WebAppPoolState -Name $pool).Value -ne 'Started') {
                Start-WebAppPool -Name $pool
                $done.Add("application pool $pool started")
            }
            if ($site.State -eq 'Started') {
                $done.Add("site $name was started already")
            } else {
                Start-Website -Name $name
                $done.Add("site $name started")
            }
        }
    }
    Write-FornaceLog ('start: ' + (@($done) -join '; '))
    return @($done)
}

function Restart-FornaceUnit {
    # Stop-FornaceUnit, then Start-FornaceUnit, with the same arguments.
    param(
        [Object[]] $Services = @(),
        [Object[]] $Sites = @(),
        [Int32] $TimeoutSeconds = 120
    )
    Stop-FornaceUnit -Services $Services -Sites $Sites -TimeoutSeconds $TimeoutSeconds
    Start-FornaceUnit -Services $Services -Sites $Sites -TimeoutSeconds $TimeoutSeconds
}
