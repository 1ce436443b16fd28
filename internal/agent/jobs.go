package agent

import (
	"context"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// jobLog records operator jobs in the raft log, so that every server
// lists and follows a promotion or a rollback, whichever server runs it
// (api.JobLog).
type jobLog struct{ a *Agent }

var _ api.JobLog = jobLog{}

func (l jobLog) RecordJob(ctx context.Context, j api.Job) error {
	entry, err := fsm.Encode(fsm.JobRequestType, j)
	if err != nil {
		return err
	}
	_, err = forwardingLog{l.a}.Apply(ctx, entry)
	return err
}

func (l jobLog) Jobs() []api.Job {
	return l.a.fsm.Jobs()
}

func (l jobLog) Job(id string) (api.Job, bool) {
	return l.a.fsm.Job(id)
}
