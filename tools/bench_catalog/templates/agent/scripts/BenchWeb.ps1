# Fornace benchmark: web server steps.

function Install-BenchWebServer {
    param([String[]] $Features = @('Web-Server', 'Web-Asp-Net45', 'Web-Mgmt-Console'))
    $result = Install-WindowsFeature -Name $Features
    if (-not $result.Success) { throw "IIS installation failed: $($result.ExitCode)" }
    Write-BenchLog "IIS installed ($($Features -join ', '))"
}
