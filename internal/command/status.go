package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// StatusCommand shows the agent's view of the cluster.
type StatusCommand struct{ Meta }

func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd status [options]

  Shows the agent's view of the cluster: its name, the raft leader, its
  applied raft index, how many users and open connections the placement
  maps hold, its workers counted by state, and the raft members (ID,
  ADDRESS, VOTER, LEADER), sorted by ID.

  It is the view of the agent asked, which may lag the leader's: a
  follower cut off from the leader still shows the last leader it knew.

Options:

  -json              Print the API's JSON instead (it also lists each
                     worker, as "stickyd worker list -json" does).
` + apiOptionsHelp)
}

func (c *StatusCommand) Synopsis() string { return "Show the agent's view of the cluster" }

func (c *StatusCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("status")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	body, st, err := readStatus(opts, "reading the agent's status")
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		c.printJSON(body)
		return 0
	}
	leader := st.Leader
	if leader == "" {
		leader = "none"
	}
	out := formatKV([][2]string{
		{"Name", orDash(st.Name)},
		{"Leader", leader},
		{"Applied index", strconv.FormatUint(st.Index, 10)},
		{"Users", strconv.Itoa(st.Users)},
		{"Connections", strconv.Itoa(st.Conns)},
		{"Workers", workerCounts(st.Workers)},
	})
	members := sortedMembers(st.Members)
	if len(members) == 0 {
		out += "\n\nNo raft members"
	} else {
		rows := make([][]string, len(members))
		for i, p := range members {
			rows[i] = []string{p.ID, orDash(p.Address), strconv.FormatBool(p.Voter), strconv.FormatBool(p.Leader)}
		}
		out += "\n\nMembers\n" + formatTable([]string{"ID", "ADDRESS", "VOTER", "LEADER"}, rows)
	}
	c.UI.Output(out)
	return 0
}

// readStatus calls GET /v1/status and returns the answer as it came (for
// -json) and decoded. Errors of the call start with doing; an error in
// the options (no token, a bad address) is returned as it is, as every
// client command does.
func readStatus(opts *apiOptions, doing string) ([]byte, client.Status, error) {
	api, err := opts.client()
	if err != nil {
		return nil, client.Status{}, err
	}
	defer api.Close()
	ctx, stop := apiContext()
	defer stop()

	var body []byte
	st, err := api.Status(ctx, client.KeepBody(&body))
	if err != nil {
		return nil, client.Status{}, fmt.Errorf("%s: %w", doing, err)
	}
	return body, st, nil
}

// membersJSON is the "members" of a status answer, its values untouched;
// an answer without members (the agent could not read its raft
// configuration) gives [].
func membersJSON(body []byte) []byte {
	var st struct {
		Members json.RawMessage `json:"members"`
	}
	if json.Unmarshal(body, &st) != nil || len(st.Members) == 0 || bytes.Equal(st.Members, []byte("null")) {
		return []byte("[]")
	}
	return st.Members
}

// sortedMembers returns the members sorted by ID, leaving ms as it was.
func sortedMembers(ms []client.Peer) []client.Peer {
	ms = slices.Clone(ms)
	slices.SortStableFunc(ms, func(a, b client.Peer) int { return strings.Compare(a.ID, b.ID) })
	return ms
}

// raftState is a member's raft state as Consul and Nomad write it.
func raftState(p client.Peer) string {
	if p.Leader {
		return "leader"
	}
	return "follower"
}

// workerStates is the order in which workerCounts lists the states it
// knows; others follow, sorted.
var workerStates = []string{client.WorkerReady, client.WorkerStarting, client.WorkerDead, client.WorkerRefused, client.WorkerStopped}

// workerCounts sums workers up by state: "4 (3 ready, 1 dead)", or "0".
// A worker without a state counts as "unknown".
func workerCounts(ws []client.Worker) string {
	if len(ws) == 0 {
		return "0"
	}
	n := map[string]int{}
	var others []string
	for _, w := range ws {
		s := w.State
		if s == "" {
			s = "unknown"
		}
		if n[s] == 0 && !slices.Contains(workerStates, s) {
			others = append(others, s)
		}
		n[s]++
	}
	slices.Sort(others)
	var parts []string
	for _, s := range append(slices.Clone(workerStates), others...) {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
		}
	}
	return fmt.Sprintf("%d (%s)", len(ws), strings.Join(parts, ", "))
}
