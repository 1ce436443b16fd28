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
	entry, err := fsm.Encode(fsm.JobRequestType, fsm.JobRecord(j))
	if err != nil {
		return err
	}
	_, err = forwardingLog{l.a}.Apply(ctx, entry)
	return err
}

func (l jobLog) Jobs() []api.Job {
	recs := l.a.fsm.Jobs()
	out := make([]api.Job, len(recs))
	for i, r := range recs {
		out[i] = api.Job(r)
	}
	return out
}

func (l jobLog) Job(id string) (api.Job, bool) {
	r, ok := l.a.fsm.Job(id)
	return api.Job(r), ok
}
