#Requires -RunAsAdministrator
<#
.SYNOPSIS
    Install the Mirbad node agent as the Windows service mirbad-agent and join it to a fleet.

.DESCRIPTION
    The same order as install-linux.sh (docs/deploy.md): enrollment first, into a scratch folder, so a
    bad, used or expired token exits 2 with the master's message and nothing is installed; then the
    folders under %ProgramData%\Mirbad, the settings (kept when present), an Event Log source, the
    service under its virtual account NT SERVICE\mirbad-agent (no password; the folders are granted to
    it alone besides SYSTEM and Administrators), restart-on-failure actions, and a (re)start.
    Rerunning is safe: an enrolled node keeps its identity and needs no token.

    The service runs `mirbad-agent.exe service`, the agent's Service Control Manager mode: RUNNING once
    the agent listens, a stop or shutdown control stops the agent (its models keep running), a failure
    stops the service with a service-specific exit code, which the restart actions also cover; warnings
    and errors go to the Event Log. docs/deploy.md says what is and is not checked.

.EXAMPLE
    .\install-windows.ps1 -Master https://master.lan:8443 -Token mbj1.... -San gpu-3.lan -San 10.0.0.9

.EXAMPLE
    .\install-windows.ps1 -Uninstall -Purge
#>
[CmdletBinding(DefaultParameterSetName = 'Install')]
param(
    [Parameter(ParameterSetName = 'Install')] [string] $Master,
    [Parameter(ParameterSetName = 'Install')] [string] $Token,
    [Parameter(ParameterSetName = 'Install')] [string] $Name,
    [Parameter(ParameterSetName = 'Install')] [string[]] $San = @(),
    [Parameter(ParameterSetName = 'Install')] [string] $ModelRoot,
    [Parameter(ParameterSetName = 'Install')] [string] $AgentExe,
    [Parameter(ParameterSetName = 'Install')] [switch] $Reenroll,
    [Parameter(ParameterSetName = 'Uninstall', Mandatory = $true)] [switch] $Uninstall,
    [Parameter(ParameterSetName = 'Uninstall')] [switch] $Purge
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

$ServiceName = 'mirbad-agent'
$Account = "NT SERVICE\$ServiceName"
$DataRoot = Join-Path $env:ProgramData 'Mirbad'
$State = Join-Path $DataRoot 'agent'
$Config = Join-Path $DataRoot 'agent.toml'
if (-not $ModelRoot) { $ModelRoot = Join-Path $State 'models' }

function Stop-Install([string] $Message, [int] $Code = 1) {
    [Console]::Error.WriteLine("install-windows.ps1: $Message")
    exit $Code
}

function Invoke-Sc([string[]] $Arguments) {
    # sc.exe reports failure only through its exit code.
    & sc.exe @Arguments | Out-Null
    if ($LASTEXITCODE -ne 0) { Stop-Install "sc.exe $($Arguments -join ' ') failed (exit $LASTEXITCODE)" }
}

if ($Uninstall) {
    $service = Get-Service -Name $ServiceName -ErrorAction SilentlyContinue
    if ($null -ne $service) {
        if ($service.Status -ne 'Stopped') { Stop-Service -Name $ServiceName -Force }
        Invoke-Sc @('delete', $ServiceName)
    }
    if ([System.Diagnostics.EventLog]::SourceExists($ServiceName)) {
        [System.Diagnostics.EventLog]::DeleteEventSource($ServiceName)
    }
    Write-Output "removed the service $ServiceName; models it started keep running: stop them in the portal first"
    if ($Purge) {
        Remove-Item -LiteralPath $State, $Config -Recurse -Force -ErrorAction SilentlyContinue
        Write-Output "removed $State (the node's identity) and $Config; remove the node on the master too"
    } else {
        Write-Output "kept $State and ${Config}: a reinstall needs no token (-Purge removes them)"
    }
    exit 0
}

if (-not $AgentExe) {
    $found = Get-Command 'mirbad-agent.exe' -ErrorAction SilentlyContinue
    if ($null -ne $found) { $AgentExe = $found.Source }
}
if (-not $AgentExe -or -not (Test-Path -LiteralPath $AgentExe -PathType Leaf)) {
    Stop-Install 'mirbad-agent.exe not found; install it (docs/deploy.md) and pass -AgentExe'
}
$AgentExe = (Resolve-Path -LiteralPath $AgentExe).Path

# 1. Enrollment, before anything is written.
$scratch = Join-Path ([System.IO.Path]::GetTempPath()) ("mirbad-agent-install-" + [guid]::NewGuid())
$node = $null
try {
    $enrolled = Test-Path -LiteralPath (Join-Path $State 'agent.crt')
    if (-not $enrolled -or $Reenroll) {
        if (-not $Master -or -not $Token) { Stop-Install '-Master and -Token are required to enroll this node' 2 }
        $identity = Join-Path $scratch 'identity'
        $enrollArgs = @('enroll', '--master', $Master, '--token', $Token, '--state-dir', $identity)
        if ($Name) { $enrollArgs += @('--name', $Name) }
        foreach ($entry in $San) { $enrollArgs += @('--san', $entry) }
        # The agent prints the master's refusal on stderr, which goes straight to the console.
        $output = & $AgentExe @enrollArgs
        $status = $LASTEXITCODE
        if ($status -ne 0) {
            [Console]::Error.WriteLine("install-windows.ps1: enrollment failed (exit $status); nothing was installed")
            exit $status
        }
        $output | Write-Output
        $match = $output | Select-String -Pattern '^enrolled as node (\S+) with' | Select-Object -First 1
        if ($null -ne $match) { $node = $match.Matches[0].Groups[1].Value }
    } elseif ($Token) {
        Write-Output 'already enrolled: the token was not used (-Reenroll replaces the identity)'
    }

    # 2. Folders, the identity, the settings (UTF-8 without a BOM: the agent's TOML reader refuses one).
    New-Item -ItemType Directory -Force -Path $State, $ModelRoot | Out-Null
    if ($null -ne $node) {
        foreach ($file in 'agent.key', 'agent.crt', 'agent-ca.crt') {
            Copy-Item -LiteralPath (Join-Path $identity $file) -Destination (Join-Path $State $file) -Force
        }
    }
    if (Test-Path -LiteralPath $Config) {
        Write-Output "keeping $Config"
    } else {
        $lines = @('# Written by install-windows.ps1; docs/agent.md lists every setting.')
        # TOML literal strings: a Windows path's backslashes are not escapes there.
        if ($null -ne $node) { $lines += "node_name = '$node'" }
        $lines += "state_dir = '$State'"
        $lines += "model_roots = ['$ModelRoot']"
        $lines += '[docker]'
        $lines += 'enabled = false'
        $utf8 = New-Object System.Text.UTF8Encoding($false)
        [System.IO.File]::WriteAllText($Config, (($lines -join "`n") + "`n"), $utf8)
        Write-Output "wrote $Config"
    }

    # 3. The Event Log source, the service under its virtual account, restart on failure.
    if (-not [System.Diagnostics.EventLog]::SourceExists($ServiceName)) {
        [System.Diagnostics.EventLog]::CreateEventSource($ServiceName, 'Application')
    }
    # `service`, not `serve`: it answers the SCM (a plain `serve` is ended with error 1053).
    $binaryPath = "`"$AgentExe`" service --config `"$Config`" --state-dir `"$State`""
    if ($null -eq (Get-Service -Name $ServiceName -ErrorAction SilentlyContinue)) {
        New-Service -Name $ServiceName -BinaryPathName $binaryPath -DisplayName 'Mirbad node agent' `
            -Description 'Runs models behind mutual TLS on port 9443 for the Mirbad master.' `
            -StartupType Automatic | Out-Null
    } else {
        Invoke-Sc @('config', $ServiceName, 'binPath=', $binaryPath, 'start=', 'auto')
    }
    Invoke-Sc @('config', $ServiceName, 'obj=', $Account)
    Invoke-Sc @('failure', $ServiceName, 'reset=', '86400', 'actions=', 'restart/5000/restart/5000/restart/30000')
    # Restart also when the agent stops itself with a non-zero exit code, not only when it crashes.
    Invoke-Sc @('failureflag', $ServiceName, '1')

    # Only SYSTEM, Administrators and the service's own account may open the state (its private key).
    # SIDs, not names: the group names differ by display language.
    & icacls.exe $State /inheritance:r /grant:r '*S-1-5-18:(OI)(CI)F' '*S-1-5-32-544:(OI)(CI)F' "${Account}:(OI)(CI)M" | Out-Null
    if ($LASTEXITCODE -ne 0) { Stop-Install "icacls on $State failed (exit $LASTEXITCODE)" }
    & icacls.exe $ModelRoot /grant "${Account}:(OI)(CI)M" | Out-Null
    if ($LASTEXITCODE -ne 0) { Stop-Install "icacls on $ModelRoot failed (exit $LASTEXITCODE)" }

    # 4. (Re)start: a rerun after an upgrade runs the new agent, which adopts the running models.
    Restart-Service -Name $ServiceName -Force
    Write-Output "mirbad-agent is installed and started; its events: Get-EventLog -LogName Application -Source $ServiceName"
} finally {
    Remove-Item -LiteralPath $scratch -Recurse -Force -ErrorAction SilentlyContinue
}
