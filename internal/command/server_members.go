package command

import (
	"strconv"
	"strings"
)

// ServerMembersCommand lists the raft members, Nomad's "server members".
type ServerMembersCommand struct{ Meta }

func (c *ServerMembersCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd server members [options]

  Lists the members of the raft cluster as the agent asked sees them,
  sorted by name: their name (the agent's name, which is its raft ID),
  raft address, status (leader or follower) and whether they vote.

Options:

  -json              Print the members as the API gives them (id, address,
                     voter, leader) instead of a table.
` + apiOptionsHelp)
}

func (c *ServerMembersCommand) Synopsis() string { return "List the raft members" }

func (c *ServerMembersCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("server members")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	body, st, err := readStatus(opts, "listing server members")
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		c.printJSON(membersJSON(body))
		return 0
	}
	members := sortedMembers(st.Members)
	if len(members) == 0 {
		c.UI.Output("No raft members")
		return 0
	}
	rows := make([][]string, len(members))
	for i, p := range members {
		rows[i] = []string{p.ID, orDash(p.Address), raftState(p), strconv.FormatBool(p.Voter)}
	}
	c.UI.Output(formatTable([]string{"NAME", "ADDRESS", "STATUS", "VOTER"}, rows))
	return 0
}
