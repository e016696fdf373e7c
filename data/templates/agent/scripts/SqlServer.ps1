# Fornace execution plans for Windows units: SQL Server (unattended setup,
# authentication mode, T-SQL through System.Data.SqlClient).  Needs
# WindowsCore.ps1.
#
# Setup media: SetupPath when given, else C:\Fornace\Media\SQLServer\setup.exe,
# else the root of any drive holding setup.exe and an x64\Setup folder (the
# SQL Server ISO mounted or attached to the image).

function Get-FornaceSqlServiceName {
    param([String] $InstanceName = 'MSSQLSERVER')
    if ($InstanceName -eq 'MSSQLSERVER') { return 'MSSQLSERVER' }
    return 'MSSQL$' + $InstanceName
}

function Get-FornaceSqlServerInstance {
    # The server name a local connection uses.
    param([String] $InstanceName = 'MSSQLSERVER')
    if ($InstanceName -eq 'MSSQLSERVER') { return $env:COMPUTERNAME }
    return "$env:COMPUTERNAME\$InstanceName"
}

function Invoke-FornaceSql {
    # Runs T-SQL on a local instance with Windows authentication (the agent's
    # account is a member of BUILTIN\Administrators, a sysadmin); values go
    # in as @parameters, never spliced into the text.  Returns the rows.
    param(
        [Parameter(Mandatory = $true)] [String] $Query,
        [Hashtable] $Parameters = @{},
        [String] $InstanceName = 'MSSQLSERVER',
        [String] $Database = 'master',
        [Int32] $TimeoutSeconds = 600
    )
    $builder = New-Object -TypeName System.Data.SqlClient.SqlConnectionStringBuilder
    $builder['Data Source'] = Get-FornaceSqlServerInstance -InstanceName $InstanceName
    $builder['Initial Catalog'] = $Database
    $builder['Integrated Security'] = $true
    $builder['Connect Timeout'] = 60
    $connection = New-Object -TypeName System.Data.SqlClient.SqlConnection -ArgumentList $builder.ConnectionString
    try {
        $connection.Open()
        $command = $connection.CreateCommand()
        $command.CommandText = $Query
        $command.CommandTimeout = $TimeoutSeconds
        foreach ($key in $Parameters.Keys) {
            [void] $command.Parameters.AddWithValue("@$key", $Parameters[$key])
        }
        $table = New-Object -TypeName System.Data.DataTable
        $reader = $command.ExecuteReader()
        try { $table.Load($reader) } finally { $reader.Dispose() }
        foreach ($row in $table.Rows) { $row }
    } finally {
        $connection.Dispose()
    }
}

function ConvertTo-FornaceSqlName {
    # A T-SQL identifier in brackets.
    param([Parameter(Mandatory = $true)] [String] $Name)
    return '[' + $Name.Replace(']', ']]') + ']'
}

function ConvertTo-FornaceSqlString {
    # A T-SQL Unicode string literal.
    param([Parameter(Mandatory = $true)] [AllowEmptyString()] [String] $Text)
    return "N'" + $Text.Replace("'", "''") + "'"
}

function Find-FornaceSqlSetup {
    param([String] $SetupPath = '')
    $candidates = @()
    if (Test-FornaceValue $SetupPath) { $candidates += $SetupPath }
    $candidates += 'C:\Fornace\Media\SQLServer\setup.exe'
    foreach ($drive in Get-PSDrive -PSProvider FileSystem) {
        $candidates += Join-Path $drive.Root 'setup.exe'
    }
    foreach ($candidate in $candidates) {
        $folder = Split-Path -Parent $candidate
        if ((Test-Path -Path $candidate) -and (Test-Path -Path (Join-Path $folder 'x64\Setup'))) {
            return $candidate
        }
    }
    throw 'SQL Server setup media not found (setup.exe with x64\Setup, e.g. the SQL Server ISO attached to the instance)'
}

function Set-FornaceSqlAuthentication {
    # Windows authentication only, or mixed mode with the sa login enabled
    # and given the password.  The service restarts when the mode changes.
    param(
        [String] $InstanceName = 'MSSQLSERVER',
        [Boolean] $Mixed = $false,
        [String] $SaPassword = ''
    )
    $instanceId = (Get-ItemProperty -Path 'HKLM:\SOFTWARE\Microsoft\Microsoft SQL Server\Instance Names\SQL').$InstanceName
    $key = "HKLM:\SOFTWARE\Microsoft\Microsoft SQL Server\$instanceId\MSSQLServer"
    $mode = 1
    if ($Mixed) { $mode = 2 }
    if ((Get-ItemProperty -Path $key -Name LoginMode).LoginMode -ne $mode) {
        Set-ItemProperty -Path $key -Name LoginMode -Value $mode
        $service = Get-FornaceSqlServiceName -InstanceName $InstanceName
        Restart-Service -Name $service -Force
        $agent = 'SQLSERVERAGENT'
        if ($InstanceName -ne 'MSSQLSERVER') { $agent = 'SQLAgent$' + $InstanceName }
        Start-Service -Name $agent -ErrorAction SilentlyContinue
    }
    if ($Mixed) {
        if ($SaPassword.Length -gt 128) { throw 'the sa password is longer than 128 characters' }
        $query = "DECLARE @sql nvarchar(max) = N'ALTER LOGIN [sa] WITH PASSWORD = ' + QUOTENAME(@password, '''') + N'; ALTER LOGIN [sa] ENABLE;'; EXEC (@sql);"
        Invoke-FornaceSql -InstanceName $InstanceName -Query $query -Parameters @{ password = $SaPassword } | Out-Null
    } else {
        Invoke-FornaceSql -InstanceName $InstanceName -Query 'ALTER LOGIN [sa] DISABLE;' | Out-Null
    }
}

function Install-FornaceSqlServer {
    # SQL Server (database engine and full-text search) installed unattended:
    # mixed mode authentication with the sa password when MixedModeAuth,
    # else Windows authentication; sysadmins are the local Administrators
    # (and the domain's Domain Admins on a domain member); the service runs
    # as ServiceUserName (a domain account, for AlwaysOn) or the default
    # virtual account.  Already installed: only the authentication mode and
    # the sa password are brought in line.
    param(
        [Object] $MixedModeAuth = $false,
        [String] $SaPassword = '',
        [String] $DomainName = '',
        [String] $ServiceUserName = '',
        [String] $ServicePassword = '',
        [String] $InstanceName = 'MSSQLSERVER',
        [String] $Features = 'SQLENGINE,FULLTEXT',
        [String] $SetupPath = ''
    )
    $mixed = ConvertTo-FornaceFlag $MixedModeAuth
    if ($mixed -and -not (Test-FornaceValue $SaPassword)) {
        throw 'mixed mode authentication needs the sa password'
    }
    $service = Get-FornaceSqlServiceName -InstanceName $InstanceName
    $installed = $false
    if (-not (Get-Service -Name $service -ErrorAction SilentlyContinue)) {
        $setup = Find-FornaceSqlSetup -SetupPath $SetupPath
        $admins = @('"BUILTIN\Administrators"')
        if (Test-FornaceValue $DomainName) {
            $admins += '"{0}\Domain Admins"' -f (Get-FornaceNetBiosName -DomainName $DomainName)
        }
        $options = [ordered] @{
            ACTION = 'Install'
            QUIET = 'True'
            IACCEPTSQLSERVERLICENSETERMS = 'True'
            UPDATEENABLED = 'False'
            FEATURES = $Features
            INSTANCENAME = $InstanceName
            TCPENABLED = '1'
            SQLSVCSTARTUPTYPE = 'Automatic'
            AGTSVCSTARTUPTYPE = 'Automatic'
        }
        $secrets = @{}
        if (Test-FornaceValue $ServiceUserName) {
            $options['SQLSVCACCOUNT'] = Get-FornaceAccountName -UserName $ServiceUserName -DomainName $DomainName
            $secrets['SQLSVCPASSWORD'] = $ServicePassword
        }
        if ($mixed) {
            $options['SECURITYMODE'] = 'SQL'
            $secrets['SAPWD'] = $SaPassword
        }
        foreach ($value in $secrets.Values) {
            if ($value.Contains('"')) { throw 'SQL Server setup cannot take a password containing a double quote' }
        }
        # the options (passwords included) go in a configuration file readable
        # by the agent's account only, removed once setup ends
        $file = Join-Path $env:TEMP ('fornace-sql-{0}.ini' -f [Guid]::NewGuid())
        $lines = @('[OPTIONS]')
        foreach ($name in $options.Keys) { $lines += '{0}="{1}"' -f $name, $options[$name] }
        $lines += 'SQLSYSADMINACCOUNTS=' + ($admins -join ' ')
        foreach ($name in $secrets.Keys) { $lines += '{0}="{1}"' -f $name, $secrets[$name] }
        try {
            Set-Content -Path $file -Value $lines -Encoding Unicode
            & icacls.exe $file /inheritance:r /grant:r '*S-1-5-18:F' '*S-1-5-32-544:F' /Q | Out-Null
            $process = Start-Process -FilePath $setup -ArgumentList "/ConfigurationFile=`"$file`"" `
                -Wait -PassThru -NoNewWindow
        } finally {
            Remove-Item -Path $file -Force -ErrorAction SilentlyContinue
        }
        if (@(0, 3010) -notcontains $process.ExitCode) {
            throw ("SQL Server setup failed with exit code {0}; see Summary.txt under " +
                   "C:\Program Files\Microsoft SQL Server\*\Setup Bootstrap\Log") -f $process.ExitCode
        }
        $installed = $true
        Write-FornaceLog "SQL Server instance $InstanceName installed"
    }
    Start-Service -Name $service
    Set-FornaceSqlAuthentication -InstanceName $InstanceName -Mixed $mixed -SaPassword $SaPassword
    Enable-FornaceFirewallPort -Port 1433 -Description 'SQL Server'
    $mode = 'Windows authentication'
    if ($mixed) { $mode = 'mixed mode authentication' }
    if ($installed) { return "SQL Server instance $InstanceName installed ($mode)" }
    "SQL Server instance $InstanceName already installed ($mode)"
}
