package nomad

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Register submits a job Render built, unless Nomad already runs it: when
// the registered job is not stopped and its MetaSpec equals the new one,
// nothing is sent and the evaluation ID is empty. (Nomad itself keeps the
// version of an unchanged job, but still creates an evaluation on every
// registration; a reconciler calling Register in a loop would fill Nomad
// with them.)
//
// The registration is checked against the job's JobModifyIndex as read
// (EnforceIndex), so a concurrent change makes it fail rather than be
// overwritten. When the job has a scaling block, the running count is kept
// if it lies within the new bounds, so an autoscaler's choice survives a new
// bundle. The job's Namespace and Region, when set, override the client's.
func Register(ctx context.Context, c *api.Client, job *api.Job) (evalID string, err error) {
	if job == nil || job.ID == nil || !strings.HasPrefix(*job.ID, JobPrefix) {
		return "", errors.New("registering job: not a group job (render it with Render)")
	}
	id := *job.ID
	q := &api.QueryOptions{Namespace: deref(job.Namespace), Region: deref(job.Region)}
	cur, err := info(ctx, c, id, q)
	if err != nil {
		return "", err
	}
	live := cur != nil && !deref(cur.Stop)
	if live && job.Meta[MetaSpec] != "" && cur.Meta[MetaSpec] == job.Meta[MetaSpec] {
		return "", nil
	}
	opts := &api.RegisterOptions{EnforceIndex: true}
	if cur != nil {
		opts.ModifyIndex = deref(cur.JobModifyIndex)
	}
	if live {
		job = keepCounts(job, cur)
	}
	w := &api.WriteOptions{Namespace: q.Namespace, Region: q.Region}
	resp, _, err := c.Jobs().RegisterOpts(job, opts, w.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("registering job %q: %w", id, err)
	}
	return resp.EvalID, nil
}

// Deregister stops the job of a group, in the client's namespace and
// region; purge also deletes it from Nomad at once (else Nomad's garbage
// collector does, later). A job that does not exist, or is already stopped
// and not to be purged, is left alone without error.
func Deregister(ctx context.Context, c *api.Client, group string, purge bool) error {
	id := JobID(group)
	cur, err := info(ctx, c, id, &api.QueryOptions{})
	if err != nil {
		return err
	}
	if cur == nil || deref(cur.Stop) && !purge {
		return nil
	}
	w := &api.WriteOptions{}
	if _, _, err := c.Jobs().Deregister(id, purge, w.WithContext(ctx)); err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("deregistering job %q: %w", id, err)
	}
	return nil
}

// Jobs lists the groups that have a job in the client's namespace and
// region, stopped ones included, sorted: the job IDs with JobPrefix cut off.
// A reconciler deregisters those of retired groups.
func Jobs(ctx context.Context, c *api.Client) ([]string, error) {
	q := &api.QueryOptions{Prefix: JobPrefix}
	stubs, _, err := c.Jobs().List(q.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing group jobs: %w", err)
	}
	groups := []string{}
	for _, s := range stubs {
		// The prefix match is the server's; check it, and the group name.
		if g, ok := strings.CutPrefix(s.ID, JobPrefix); ok && groupRE.MatchString(g) {
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	return groups, nil
}

// info reads a job; a missing one is nil without error.
func info(ctx context.Context, c *api.Client, id string, q *api.QueryOptions) (*api.Job, error) {
	job, _, err := c.Jobs().Info(id, q.WithContext(ctx))
	switch {
	case isNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading job %q: %w", id, err)
	}
	return job, nil
}

// keepCounts returns job with the count of each scaled task group set to
// the running one, if that lies within the group's scaling bounds. job is
// not modified: the changed groups are copies.
func keepCounts(job, cur *api.Job) *api.Job {
	running := map[string]int{}
	for _, tg := range cur.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			running[*tg.Name] = *tg.Count
		}
	}
	out := *job
	out.TaskGroups = make([]*api.TaskGroup, len(job.TaskGroups))
	for i, tg := range job.TaskGroups {
		out.TaskGroups[i] = tg
		n, ok := running[deref(tg.Name)]
		if !ok || tg.Scaling == nil || tg.Scaling.Min == nil || tg.Scaling.Max == nil {
			continue
		}
		if int64(n) >= *tg.Scaling.Min && int64(n) <= *tg.Scaling.Max {
			cp := *tg
			cp.Count = new(n)
			out.TaskGroups[i] = &cp
		}
	}
	return &out
}

// isNotFound reports whether err is Nomad's answer for a missing object.
func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Secrets are what a group job's hosts read from its Nomad variable.
type Secrets struct {
	AdminToken  string // required
	ConsulToken string // optional
	// TLS, PEM: the cluster's CA and a host certificate with its key,
	// all three or none (GroupJob.TLSCluster).
	TLSCA, TLSCert, TLSKey string
}

// PutSecrets writes a group job's Nomad variable (SecretsPath), unless it
// holds them already: the job's templates render them into the secrets
// directory (0600), so they never appear in the job itself.
func PutSecrets(ctx context.Context, c *api.Client, group, namespace, region string, s Secrets) error {
	if s.AdminToken == "" {
		return fmt.Errorf("writing the secrets of group %q: the admin token is empty", group)
	}
	want := api.VariableItems{SecretItem: s.AdminToken}
	if s.ConsulToken != "" {
		want[ConsulTokenItem] = s.ConsulToken
	}
	if (s.TLSCA == "") != (s.TLSCert == "") || (s.TLSCert == "") != (s.TLSKey == "") {
		return fmt.Errorf("writing the secrets of group %q: give the CA, the certificate and its key together", group)
	}
	if s.TLSCA != "" {
		want[TLSCAItem], want[TLSCertItem], want[TLSKeyItem] = s.TLSCA, s.TLSCert, s.TLSKey
	}
	path := SecretsPath(group)
	q := &api.QueryOptions{Namespace: namespace, Region: region}
	items, _, err := c.Variables().GetVariableItems(path, q.WithContext(ctx))
	switch {
	case err == nil && maps.Equal(items, want):
		return nil
	case err != nil && !isNotFound(err) && !errors.Is(err, api.ErrVariablePathNotFound):
		return fmt.Errorf("reading variable %q: %w", path, err)
	}
	v := &api.Variable{Namespace: namespace, Path: path, Items: want}
	w := &api.WriteOptions{Namespace: namespace, Region: region}
	if _, _, err := c.Variables().Update(v, w.WithContext(ctx)); err != nil {
		return fmt.Errorf("writing variable %q: %w", path, err)
	}
	return nil
}

// DeleteSecrets deletes a group job's Nomad variable; a missing one is no
// error.
func DeleteSecrets(ctx context.Context, c *api.Client, group string) error {
	path := SecretsPath(group)
	w := &api.WriteOptions{}
	if _, err := c.Variables().Delete(path, w.WithContext(ctx)); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting variable %q: %w", path, err)
	}
	return nil
}
