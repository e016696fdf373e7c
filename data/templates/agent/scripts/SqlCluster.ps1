# Fornace execution plans for Windows units: a failover cluster and an
# AlwaysOn availability group of SQL Server instances (SQL Server 2016 or
# later: replicas use automatic seeding, so no backup share is needed).
# Needs WindowsCore.ps1 and SqlServer.ps1.

function Install-FornaceClusterPrerequisites {
    # Failover clustering and its PowerShell module.
    $restart = Install-FornaceFeature -Name 'Failover-Clustering', 'RSAT-Clustering-PowerShell'
    foreach ($port in 3343, 5022) {
        Enable-FornaceFirewallPort -Port $port -Description 'failover cluster and AlwaysOn'
    }
    if ($restart) { return 'failover clustering installed; the restart completes it' }
    'failover clustering installed'
}

function Invoke-FornaceAsUser {
    # Runs a script block in a new PowerShell process as another (domain)
    # user: the agent's account (SYSTEM) may not create cluster objects in
    # the directory.  Returns what the block returns; its errors are errors.
    param(
        [Parameter(Mandatory = $true)] [PSCredential] $Credential,
        [Parameter(Mandatory = $true)] [ScriptBlock] $ScriptBlock,
        [Object[]] $ArgumentList = @()
    )
    $job = Start-Job -Credential $Credential -ScriptBlock $ScriptBlock -ArgumentList $ArgumentList
    try {
        Receive-Job -Job $job -Wait -ErrorAction Stop
    } finally {
        Remove-Job -Job $job -Force
    }
}

function New-FornaceDomainUser {
    # A domain user (the SQL Server service account), created in the Users
    # container when missing, enabled, its password never expiring.
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Parameter(Mandatory = $true)] [String] $UserName,
        [Parameter(Mandatory = $true)] [String] $Password,
        [Parameter(Mandatory = $true)] [String] $DomainAdminUserName,
        [Parameter(Mandatory = $true)] [String] $DomainAdminPassword
    )
    $name = $UserName
    if ($name.Contains('\')) { $name = $name.Substring($name.LastIndexOf('\') + 1) }
    if ($name.Contains('@')) { $name = $name.Substring(0, $name.IndexOf('@')) }
    if ($name -notmatch '^[A-Za-z0-9._-]{1,20}$') {
        throw "$UserName is not a valid account name (letters, digits, '.', '_', '-'; at most 20)"
    }
    $admin = Get-FornaceAccountName -UserName $DomainAdminUserName -DomainName $DomainName
    $base = 'DC=' + ($DomainName.TrimEnd('.').Split('.') -join ',DC=')
    $root = New-Object -TypeName System.DirectoryServices.DirectoryEntry `
        -ArgumentList "LDAP://$DomainName/$base", $admin, $DomainAdminPassword
    $searcher = New-Object -TypeName System.DirectoryServices.DirectorySearcher `
        -ArgumentList $root, "(&(objectCategory=person)(sAMAccountName=$name))"
    if ($searcher.FindOne()) { return "domain user $name exists" }
    $users = New-Object -TypeName System.DirectoryServices.DirectoryEntry `
        -ArgumentList "LDAP://$DomainName/CN=Users,$base", $admin, $DomainAdminPassword
    try {
        $user = $users.Children.Add("CN=$name", 'user')
        $user.Properties['sAMAccountName'].Value = $name
        $user.Properties['userPrincipalName'].Value = "$name@$DomainName"
        $user.CommitChanges()
        $user.Invoke('SetPassword', $Password)
        $user.Properties['userAccountControl'].Value = 0x10200  # normal account, password never expires
        $user.CommitChanges()
    } catch {
        # another node of the cluster may have created it at the same time
        if (-not $searcher.FindOne()) { throw }
        return "domain user $name exists"
    }
    Write-FornaceLog "domain user $name created"
    "domain user $name created"
}

function New-FornaceFailoverCluster {
    # The failover cluster of the given nodes (created once; nodes missing
    # from an existing cluster are added), without shared storage.
    param(
        [Parameter(Mandatory = $true)] [String] $ClusterName,
        [Parameter(Mandatory = $true)] [String] $StaticAddress,
        [Parameter(Mandatory = $true)] [String[]] $Nodes,
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Parameter(Mandatory = $true)] [String] $UserName,
        [Parameter(Mandatory = $true)] [String] $Password
    )
    $credential = New-FornaceCredential -UserName $UserName -Password $Password -DomainName $DomainName
    $members = Invoke-FornaceAsUser -Credential $credential -ArgumentList $ClusterName, $StaticAddress, $Nodes -ScriptBlock {
        param($name, $address, $nodes)
        $ErrorActionPreference = 'Stop'
        Import-Module FailoverClusters
        $cluster = Get-Cluster -Name $name -ErrorAction SilentlyContinue
        if (-not $cluster) {
            New-Cluster -Name $name -Node $nodes -StaticAddress $address -NoStorage -Force | Out-Null
        }
        $present = @(Get-ClusterNode -Cluster $name | ForEach-Object { $_.Name.ToUpperInvariant() })
        foreach ($node in $nodes) {
            if ($present -notcontains $node.ToUpperInvariant()) {
                Add-ClusterNode -Cluster $name -Name $node -NoStorage | Out-Null
            }
        }
        @(Get-ClusterNode -Cluster $name | ForEach-Object { $_.Name })
    }
    Write-FornaceLog "failover cluster ${ClusterName}: $($members -join ', ')"
    "failover cluster $ClusterName ($StaticAddress): $($members -join ', ')"
}

function Enable-FornaceAlwaysOn {
    # AlwaysOn availability groups on this instance (the service restarts),
    # its database mirroring endpoint on port 5022, and the right of the
    # SQL Server service account to connect to it.
    param(
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [Parameter(Mandatory = $true)] [String] $ServiceUserName,
        [String] $InstanceName = 'MSSQLSERVER',
        [Int32] $EndpointPort = 5022
    )
    $enabled = (Invoke-FornaceSql -InstanceName $InstanceName -Query "SELECT CAST(SERVERPROPERTY('IsHadrEnabled') AS int) AS enabled").enabled
    if ($enabled -ne 1) {
        if (Get-Module -ListAvailable -Name SqlServer) {
            Import-Module SqlServer
        } else {
            Import-Module SQLPS -DisableNameChecking
        }
        $path = 'SQLSERVER:\SQL\{0}\{1}' -f $env:COMPUTERNAME, $(if ($InstanceName -eq 'MSSQLSERVER') { 'DEFAULT' } else { $InstanceName })
        Enable-SqlAlwaysOn -Path $path -Force
        Write-FornaceLog "AlwaysOn enabled on instance $InstanceName"
    }
    $account = Get-FornaceAccountName -UserName $ServiceUserName -DomainName $DomainName
    $query = @"
IF NOT EXISTS (SELECT * FROM sys.database_mirroring_endpoints)
    EXEC (N'CREATE ENDPOINT [Hadr_endpoint] STATE = STARTED AS TCP (LISTENER_PORT = ' + @port + N') FOR DATABASE_MIRRORING (ROLE = ALL, ENCRYPTION = REQUIRED ALGORITHM AES)');
IF NOT EXISTS (SELECT * FROM sys.server_principals WHERE name = @account)
    EXEC (N'CREATE LOGIN ' + QUOTENAME(@account) + N' FROM WINDOWS');
DECLARE @endpoint sysname = (SELECT TOP 1 name FROM sys.database_mirroring_endpoints);
EXEC (N'GRANT CONNECT ON ENDPOINT::' + QUOTENAME(@endpoint) + N' TO ' + QUOTENAME(@account));
"@
    Invoke-FornaceSql -InstanceName $InstanceName -Query $query `
        -Parameters @{ account = $account; port = [String] $EndpointPort } | Out-Null
    "AlwaysOn enabled; endpoint on port $EndpointPort open to $account"
}

function Get-FornaceSubnetMask {
    # The IPv4 mask of the local network that holds an address (for the
    # availability group listener).
    param([Parameter(Mandatory = $true)] [String] $Address)
    $target = [Net.IPAddress]::Parse($Address).GetAddressBytes()
    foreach ($local in Get-NetIPAddress -AddressFamily IPv4) {
        $bits = [Int32] $local.PrefixLength
        $mask = [UInt32] 0
        if ($bits -gt 0) { $mask = [UInt32] ([Math]::Pow(2, 32) - [Math]::Pow(2, 32 - $bits)) }
        $maskBytes = [BitConverter]::GetBytes($mask)
        [Array]::Reverse($maskBytes)
        $mine = [Net.IPAddress]::Parse($local.IPAddress).GetAddressBytes()
        $same = $true
        for ($i = 0; $i -lt 4; $i++) {
            if (($mine[$i] -band $maskBytes[$i]) -ne ($target[$i] -band $maskBytes[$i])) { $same = $false }
        }
        if ($same -and $bits -gt 0 -and $bits -lt 32) { return [Net.IPAddress]::new([Byte[]] $maskBytes).ToString() }
    }
    throw "no local network holds address $Address"
}

function New-FornaceAvailabilityGroup {
    # On the primary replica: the databases (created when missing, full
    # recovery, backed up once), the availability group with one replica per
    # node (synchronous commit with automatic failover for SyncReplicas,
    # asynchronous otherwise; automatic seeding) and its listener.
    param(
        [Parameter(Mandatory = $true)] [String] $GroupName,
        [Parameter(Mandatory = $true)] [String[]] $Replicas,
        [String[]] $SyncReplicas = @(),
        [String[]] $Databases = @(),
        [Parameter(Mandatory = $true)] [String] $ListenerName,
        [Parameter(Mandatory = $true)] [String] $ListenerAddress,
        [Parameter(Mandatory = $true)] [String] $DomainName,
        [String] $InstanceName = 'MSSQLSERVER',
        [Int32] $EndpointPort = 5022,
        [Int32] $ListenerPort = 1433
    )
    foreach ($database in $Databases) {
        if (-not (Test-FornaceValue $database)) { continue }
        $db = ConvertTo-FornaceSqlName -Name $database
        $dbInLiteral = $db.Replace("'", "''")
        $query = "IF DB_ID(@name) IS NULL EXEC (N'CREATE DATABASE $dbInLiteral'); " +
                 "EXEC (N'ALTER DATABASE $dbInLiteral SET RECOVERY FULL');"
        Invoke-FornaceSql -InstanceName $InstanceName -Parameters @{ name = $database } -Query $query | Out-Null
        Invoke-FornaceSql -InstanceName $InstanceName -Query "BACKUP DATABASE $db TO DISK = N'NUL'" | Out-Null
    }
    $group = ConvertTo-FornaceSqlName -Name $GroupName
    $exists = Invoke-FornaceSql -InstanceName $InstanceName -Parameters @{ name = $GroupName } `
        -Query 'SELECT name FROM sys.availability_groups WHERE name = @name'
    if (-not $exists) {
        $sync = @($SyncReplicas | ForEach-Object { $_.ToUpperInvariant() })
        $replicaSpecs = foreach ($replica in $Replicas) {
            $server = $replica.ToUpperInvariant()
            $url = 'TCP://{0}.{1}:{2}' -f $replica.ToLowerInvariant(), $DomainName, $EndpointPort
            $mode = 'ASYNCHRONOUS_COMMIT, FAILOVER_MODE = MANUAL'
            if ($sync -contains $server) { $mode = 'SYNCHRONOUS_COMMIT, FAILOVER_MODE = AUTOMATIC' }
            '{0} WITH (ENDPOINT_URL = {1}, AVAILABILITY_MODE = {2}, SEEDING_MODE = AUTOMATIC, SECONDARY_ROLE (ALLOW_CONNECTIONS = ALL))' -f `
                (ConvertTo-FornaceSqlString -Text $server), (ConvertTo-FornaceSqlString -Text $url), $mode
        }
        $databaseList = ''
        $names = @($Databases | Where-Object { Test-FornaceValue $_ } | ForEach-Object { ConvertTo-FornaceSqlName -Name $_ })
        if ($names.Count -gt 0) { $databaseList = 'FOR DATABASE ' + ($names -join ', ') + ' ' }
        $create = 'CREATE AVAILABILITY GROUP {0} WITH (AUTOMATED_BACKUP_PREFERENCE = SECONDARY, DB_FAILOVER = ON) {1}REPLICA ON {2};' -f `
            $group, $databaseList, ($replicaSpecs -join ', ')
        Invoke-FornaceSql -InstanceName $InstanceName -Query $create | Out-Null
        Write-FornaceLog "availability group $GroupName created"
    }
    $listener = Invoke-FornaceSql -InstanceName $InstanceName -Parameters @{ name = $ListenerName } `
        -Query 'SELECT dns_name FROM sys.availability_group_listeners WHERE dns_name = @name'
    if (-not $listener) {
        $mask = Get-FornaceSubnetMask -Address $ListenerAddress
        $add = 'ALTER AVAILABILITY GROUP {0} ADD LISTENER {1} (WITH IP (({2}, {3})), PORT = {4});' -f `
            $group, (ConvertTo-FornaceSqlString -Text $ListenerName), (ConvertTo-FornaceSqlString -Text $ListenerAddress),
            (ConvertTo-FornaceSqlString -Text $mask), $ListenerPort
        Invoke-FornaceSql -InstanceName $InstanceName -Query $add | Out-Null
        Write-FornaceLog "listener $ListenerName ($ListenerAddress) of availability group $GroupName created"
    }
    "availability group $GroupName on $($Replicas -join ', '); listener $ListenerName ($ListenerAddress, port $ListenerPort)"
}

function Join-FornaceAvailabilityGroup {
    # On a secondary replica: joins the availability group (retrying while
    # the primary finishes creating it) and lets automatic seeding create
    # its databases.
    param(
        [Parameter(Mandatory = $true)] [String] $GroupName,
        [String] $InstanceName = 'MSSQLSERVER',
        [Int32] $TimeoutSeconds = 600
    )
    $group = ConvertTo-FornaceSqlName -Name $GroupName
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while ($true) {
        $joined = Invoke-FornaceSql -InstanceName $InstanceName -Parameters @{ name = $GroupName } `
            -Query 'SELECT ag.name FROM sys.availability_groups ag JOIN sys.dm_hadr_availability_replica_states rs ON rs.group_id = ag.group_id WHERE ag.name = @name AND rs.is_local = 1'
        if ($joined) { break }
        try {
            Invoke-FornaceSql -InstanceName $InstanceName -Query "ALTER AVAILABILITY GROUP $group JOIN;" | Out-Null
            break
        } catch {
            if ((Get-Date) -gt $deadline) { throw }
            Start-Sleep -Seconds 15
        }
    }
    Invoke-FornaceSql -InstanceName $InstanceName -Query "ALTER AVAILABILITY GROUP $group GRANT CREATE ANY DATABASE;" | Out-Null
    Write-FornaceLog "joined availability group $GroupName"
    "secondary replica of availability group $GroupName"
}
