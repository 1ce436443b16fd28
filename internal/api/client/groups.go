package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// GroupRecipe is a group as the agent stores it: what runs its workers and
// how many each agent runs (PUT /v1/groups/{group} answers it).
type GroupRecipe struct {
	Name string `json:"name"`
	// Runtime is "go-plugin" (Bundle's entry point or Command), "builtin"
	// or "python3" (Command is a WSGI application, MODULE:CALLABLE).
	Runtime string `json:"runtime"`
	// Interpreter is the Python of a "python3" group ("": the system's).
	Interpreter string `json:"interpreter,omitempty"`
	// Bundle is the digest of the application bundle ("sha256:…").
	Bundle  string            `json:"bundle,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Builtin string            `json:"builtin,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Workers int               `json:"workers"`
	// MemoryMaxMB is a worker's hard memory ceiling (0: none).
	MemoryMaxMB int `json:"memory_max_mb,omitempty"`
	// Limits bound its people's pages (nil: the SDK's defaults).
	Limits *GroupLimits `json:"limits,omitempty"`
	// Governance is the group's governance block, in JSON with the HCL
	// names.
	Governance json.RawMessage `json:"governance,omitempty"`
	// Created is the log index that created the group.
	Created uint64 `json:"created"`
}

// GroupLimits bound a group's people's pages; 0 is the SDK's default.
type GroupLimits struct {
	MaxPageBytes      int64 `json:"max_page_bytes,omitempty"`
	MaxPersonBytes    int64 `json:"max_person_bytes,omitempty"`
	MaxPagesPerConn   int32 `json:"max_pages_per_conn,omitempty"`
	MaxPagesPerPerson int32 `json:"max_pages_per_person,omitempty"`
}

// Group is a group as GET /v1/groups shows it: its recipe, where it comes
// from and what runs it now.
type Group struct {
	GroupRecipe
	// Source is "catalog" (created through the API) or "config" (an
	// agent's configuration file).
	Source string `json:"source"`
	// WorkerIDs are the group's workers this agent knows; Ready counts
	// those that can take people now.
	WorkerIDs []string `json:"worker_ids"`
	Ready     int      `json:"ready"`
	Users     int      `json:"users"`
	Default   bool     `json:"default,omitempty"`
	// Previous marks the group a rollback returns to.
	Previous bool `json:"previous,omitempty"`
}

// GroupsView is GET /v1/groups: the groups, the rules and the jobs.
type GroupsView struct {
	Default string  `json:"default"`
	Groups  []Group `json:"groups"`
	Rules   []Rule  `json:"rules"`
	Jobs    []Job   `json:"jobs"`
}

// GroupStatus is GET /v1/groups/{group}: the group and the jobs that
// concern it.
type GroupStatus struct {
	Group Group `json:"group"`
	Jobs  []Job `json:"jobs"`
}

// Rule is an assignment rule: it sends one person (User), or everyone whose
// login attribute Attr is Value, to Group.
type Rule struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	User  string `json:"user,omitempty"`
	Attr  string `json:"attr,omitempty"`
	Value string `json:"value,omitempty"`
}

// GroupRequest is the body of PUT /v1/groups/{group}: exactly one of
// Bundle, Command and Builtin.
type GroupRequest struct {
	Runtime string `json:"runtime,omitempty"`
	// Interpreter is the Python of a "python3" group ("": the system's).
	Interpreter string            `json:"interpreter,omitempty"`
	Bundle      string            `json:"bundle,omitempty"`
	Command     string            `json:"command,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Builtin     string            `json:"builtin,omitempty"`
	Workers     int               `json:"workers,omitempty"`
	MemoryMaxMB int               `json:"memory_max_mb,omitempty"`
	// Governance is the group's governance block with the HCL names.
	Governance map[string]any `json:"governance,omitempty"`
	// Limits bound the group's people's pages (nil: the SDK's defaults).
	Limits *GroupLimits `json:"limits,omitempty"`
}

// RuleRequest is the body of PUT /v1/rules/{id}: a group, and a user or an
// attribute with its value.
type RuleRequest struct {
	Group string `json:"group"`
	User  string `json:"user,omitempty"`
	Attr  string `json:"attr,omitempty"`
	Value string `json:"value,omitempty"`
}

// Job is a job's state: a promotion, a rollback or an assignment (Kind
// promote, rollback, assign) moving people between groups.
type Job struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Group string `json:"group,omitempty"`
	From  string `json:"from,omitempty"`
	// Agent is the server that runs it.
	Agent    string    `json:"agent"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Users    int       `json:"users"`
	Moved    int       `json:"moved"`
	Failed   int       `json:"failed"`
	Done     bool      `json:"done"`
	Error    string    `json:"error,omitempty"`
}

// JobProgress is one line of a job's stream: a move (Error set if it
// failed), and at the end the job with Done set.
type JobProgress struct {
	Move  *Move  `json:"move,omitempty"`
	Error string `json:"error,omitempty"`
	Job   *Job   `json:"job,omitempty"`
}

// Groups returns the groups, the rules and the recent jobs (GET
// /v1/groups).
func (c *Client) Groups(ctx context.Context, opts ...CallOption) (GroupsView, error) {
	var v GroupsView
	err := c.get(ctx, "/v1/groups", nil, &v, opts)
	return v, err
}

// Group returns a group and its jobs (GET /v1/groups/{group}); an unknown
// group is the API's 404.
func (c *Client) Group(ctx context.Context, name string, opts ...CallOption) (GroupStatus, error) {
	var s GroupStatus
	err := c.get(ctx, "/v1/groups/"+url.PathEscape(name), nil, &s, opts)
	return s, err
}

// CreateGroup records a group's recipe (PUT /v1/groups/{group}) and returns
// it as the agent stored it, its defaults applied. A group of that name is
// the API's 409.
func (c *Client) CreateGroup(ctx context.Context, name string, req GroupRequest, opts ...CallOption) (GroupRecipe, error) {
	var g GroupRecipe
	err := c.decode(ctx, http.MethodPut, "/v1/groups/"+url.PathEscape(name), nil, req, &g, opts)
	return g, err
}

// RetireGroup retires a catalog group (DELETE /v1/groups/{group}). The API
// refuses (409) while anyone is placed in it, while it is the default, or
// while a rule sends people there.
func (c *Client) RetireGroup(ctx context.Context, name string) error {
	return c.decode(ctx, http.MethodDelete, "/v1/groups/"+url.PathEscape(name), nil, nil, nil, nil)
}

// Rules lists the assignment rules, the first that matches first (GET
// /v1/rules).
func (c *Client) Rules(ctx context.Context, opts ...CallOption) ([]Rule, error) {
	var rs []Rule
	err := c.get(ctx, "/v1/rules", nil, &rs, opts)
	return rs, err
}

// The routes that start a job run it detached: they answer the job at once,
// and FollowJob streams its moves. parallel is how many moves run at a
// time, 1 to 256; 0 is the agent's default. An answer that names no job
// is a *DecodeError whose cause is ErrNoJob.

// PromoteGroup makes group the default and moves everyone who belongs to
// the default there, or only the people in from if it is set (POST
// /v1/groups/{group}/promote).
func (c *Client) PromoteGroup(ctx context.Context, group, from string, parallel int, opts ...CallOption) (Job, error) {
	query := jobQuery(parallel)
	if from != "" {
		query.Set("from", from)
	}
	return c.startJob(ctx, http.MethodPost, "/v1/groups/"+url.PathEscape(group)+"/promote", query, nil, opts)
}

// Rollback makes the previous default group the default again and moves
// back everyone the last promotion moved (POST /v1/rollback).
func (c *Client) Rollback(ctx context.Context, parallel int, opts ...CallOption) (Job, error) {
	return c.startJob(ctx, http.MethodPost, "/v1/rollback", jobQuery(parallel), nil, opts)
}

// PutRule adds or replaces the rule id (PUT /v1/rules/{id}) and moves the
// people it concerns. An unknown group is the API's 404.
func (c *Client) PutRule(ctx context.Context, id string, req RuleRequest, parallel int, opts ...CallOption) (Job, error) {
	return c.startJob(ctx, http.MethodPut, "/v1/rules/"+url.PathEscape(id), jobQuery(parallel), req, opts)
}

// DeleteRule removes the rule id (DELETE /v1/rules/{id}) and moves the
// people it sent away back to the group they now belong to. An unknown
// rule is the API's 404.
func (c *Client) DeleteRule(ctx context.Context, id string, parallel int, opts ...CallOption) (Job, error) {
	return c.startJob(ctx, http.MethodDelete, "/v1/rules/"+url.PathEscape(id), jobQuery(parallel), nil, opts)
}

// FollowJob streams a job's moves and, last, its final state (GET
// /v1/jobs/{id}?follow=1). Ending ctx stops following, not the job.
func (c *Client) FollowJob(ctx context.Context, id string) (*Stream[JobProgress], error) {
	body, err := c.open(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), url.Values{"follow": {"1"}})
	if err != nil {
		return nil, err
	}
	return newStream[JobProgress](body), nil
}

// jobQuery is the query of a route that starts a job, detached.
func jobQuery(parallel int) url.Values {
	q := url.Values{"detach": {"true"}}
	if parallel != 0 {
		q.Set("parallel", strconv.Itoa(parallel))
	}
	return q
}

func (c *Client) startJob(ctx context.Context, method, path string, query url.Values, body any, opts []CallOption) (Job, error) {
	b, err := c.do(ctx, method, path, query, body)
	if err != nil {
		return Job{}, err
	}
	keepBody(opts, b)
	var j Job
	if err := unmarshal(method, path, b, &j); err != nil {
		return Job{}, err
	}
	if j.ID == "" {
		return Job{}, &DecodeError{Method: method, Path: path, Body: b, Err: ErrNoJob}
	}
	return j, nil
}
