//go:build !linux

package host

import (
	"context"
	"errors"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// fork needs Linux's pidfds to watch a worker that is not the agent's child.
func (l *TemplateLauncher) fork(context.Context, string, *templateProc, []string) (Process, channel.Conn, error) {
	return nil, nil, errors.New("a group template (workers forked from a template process) needs Linux")
}
