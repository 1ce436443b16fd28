package command

import (
	"strconv"
	"strings"
)

// OperatorRaftListPeersCommand lists the raft peers in the format of
// Consul's "operator raft list-peers".
type OperatorRaftListPeersCommand struct{ Meta }

func (c *OperatorRaftListPeersCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator raft list-peers [options]

  Lists the peers of the raft configuration as the agent asked sees them,
  in the order of the configuration, in Consul's format: Node, ID,
  Address, State (leader or follower) and Voter. A stickyd agent's node
  name is its raft ID, so Node and ID are the same.

Options:

  -json              Print the peers as the API gives them (id, address,
                     voter, leader) instead of a table.
` + apiOptionsHelp)
}

func (c *OperatorRaftListPeersCommand) Synopsis() string { return "List the raft peers" }

func (c *OperatorRaftListPeersCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("operator raft list-peers")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	body, st, err := readStatus(opts, "listing raft peers")
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		c.printJSON(membersJSON(body))
		return 0
	}
	if len(st.Members) == 0 {
		c.UI.Output("No raft peers")
		return 0
	}
	rows := make([][]string, len(st.Members))
	for i, p := range st.Members {
		rows[i] = []string{p.ID, p.ID, orDash(p.Address), raftState(p), strconv.FormatBool(p.Voter)}
	}
	c.UI.Output(formatTable([]string{"Node", "ID", "Address", "State", "Voter"}, rows))
	return 0
}
