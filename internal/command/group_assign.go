package command

import (
	"context"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GroupAssignCommand adds an assignment rule and moves the people it
// concerns.
type GroupAssignCommand struct{ Meta }

func (c *GroupAssignCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group assign [options] GROUP

  Adds (or replaces) an assignment rule sending one person, or everyone
  whose login attribute matches, to GROUP (a canary, a customer's own
  release), then moves the people it concerns there, hot. The first rule
  that matches a person wins; people no rule matches belong to the default
  group. Attributes are what the application declares at login
  (worker.Session.LoginWith).

Options:

  -user=NAME         The person to send.
  -attr=KEY=VALUE    Everyone whose attribute KEY is VALUE.
  -id=ID             The rule's id (default: derived from the match and
                     the group, e.g. "maria-canary"); "group unassign ID"
                     removes it.
  -parallel=N        Moves at a time, 1 to 256. Default 8.
  -detach            Return at once instead of following the moves.
` + apiOptionsHelp)
}

func (c *GroupAssignCommand) Synopsis() string { return "Send a person or a team to a group" }

func (c *GroupAssignCommand) Run(args []string) int {
	var user, attr, id string
	var parallel int
	var detach bool
	fs, opts := c.apiFlagSet("group assign")
	fs.StringVar(&user, "user", "", "")
	fs.StringVar(&attr, "attr", "", "")
	fs.StringVar(&id, "id", "", "")
	fs.IntVar(&parallel, "parallel", 8, "")
	fs.BoolVar(&detach, "detach", false, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	group := pos[0]
	req := client.RuleRequest{Group: group, User: user}
	switch {
	case (user == "") == (attr == ""):
		c.UI.Error("give exactly one of -user and -attr")
		return 1
	case attr != "":
		k, v, ok := strings.Cut(attr, "=")
		if !ok || k == "" {
			c.UI.Error(fmt.Sprintf("-attr %q: want KEY=VALUE", attr))
			return 1
		}
		req.Attr, req.Value = k, v
	}
	if id == "" {
		id = ruleID(user+req.Attr+"-"+req.Value, group)
		if user != "" {
			id = ruleID(user, group)
		}
	}
	if c.badParallel(parallel) {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		c.UI.Output(fmt.Sprintf("Rule %s: sending %s to %s", id, orDash(strings.TrimPrefix(user+" "+attr, " ")), group))
		return c.startJob(ctx, api, "assigning to "+group, detach, func() (client.Job, error) {
			return api.PutRule(ctx, id, req, parallel)
		})
	})
}

// ruleID derives a rule id from what it matches and its group.
func ruleID(match, group string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(match + "-" + group) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// GroupUnassignCommand removes an assignment rule.
type GroupUnassignCommand struct{ Meta }

func (c *GroupUnassignCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group unassign [options] RULE-ID

  Removes an assignment rule ("stickyd group list" shows them), then moves
  the people it sent away back to the group they now belong to.

Options:

  -parallel=N        Moves at a time, 1 to 256. Default 8.
  -detach            Return at once instead of following the moves.
` + apiOptionsHelp)
}

func (c *GroupUnassignCommand) Synopsis() string { return "Remove an assignment rule" }

func (c *GroupUnassignCommand) Run(args []string) int {
	var parallel int
	var detach bool
	fs, opts := c.apiFlagSet("group unassign")
	fs.IntVar(&parallel, "parallel", 8, "")
	fs.BoolVar(&detach, "detach", false, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok || c.badParallel(parallel) {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		return c.startJob(ctx, api, "removing rule "+pos[0], detach, func() (client.Job, error) {
			return api.DeleteRule(ctx, pos[0], parallel)
		})
	})
}

// GroupRetireCommand removes an empty group.
type GroupRetireCommand struct{ Meta }

func (c *GroupRetireCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group retire [options] NAME

  Retires a group of the catalog: every agent stops its workers. It is
  refused while anyone is placed in it, while it is the default group, or
  while a rule sends people there: move them first (promote another group,
  remove the rule). Groups from an agent's configuration file are retired by
  editing that file.
` + apiOptionsHelp)
}

func (c *GroupRetireCommand) Synopsis() string { return "Retire an empty group" }

func (c *GroupRetireCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("group retire")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		if err := api.RetireGroup(ctx, pos[0]); err != nil {
			return c.fail(fmt.Errorf("retiring group %s: %w", pos[0], err))
		}
		c.UI.Output(fmt.Sprintf("Group %s retired; every agent stops its workers.", pos[0]))
		return 0
	})
}
