package host

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the worker if the agent dies without
// stopping it, so a crashed agent leaves no orphans.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
