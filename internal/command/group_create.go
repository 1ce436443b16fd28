package command

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GroupCreateCommand records a group's recipe; every agent starts its
// workers.
type GroupCreateCommand struct{ Meta }

func (c *GroupCreateCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group create [options] NAME

  Creates a group from a recipe: what runs its workers (a bundle from the
  archive, a plugin command, or an application built into stickyd) and how
  many each agent runs. The recipe is replicated: every agent starts the
  group's workers. Nobody moves there until the group is promoted or a rule
  sends people to it.

Options:

  -bundle=DIGEST     The application bundle (sha256:…) to run, from the
                     agents' bundle archive (see stickyd bundle).
  -command=PATH      A go-plugin worker binary present on every agent
                     (instead of -bundle). Repeat -arg for its arguments
                     and -env KEY=VALUE for its environment.
  -builtin=NAME      An application compiled into stickyd (e.g. demo).
  -runtime=python3   -command is then a WSGI application as MODULE:CALLABLE,
                     run by stickyd's Python worker (set PYTHONPATH with
                     -env to where it lives; see docs/python.md).
  -interpreter=PATH  The Python that runs a python3 group: a virtualenv's
                     bin/python, or a name on every agent's PATH. Default
                     /usr/bin/python3.
  -workers=N         Workers per agent, 1 to 64. Default 1.
  -memory-max-mb=N   A worker's hard memory ceiling (0: none).
  -max-page-bytes=N, -max-person-bytes=N
                     Bound a page's state and a person's pages in a worker
                     (0: the SDK's defaults, 256 MiB and 1 GiB).
  -max-pages-per-conn=N, -max-pages-per-person=N
                     Bound the pages open at once (0: 100 and 500).
  -governance=FILE   The group's governance block, as JSON with the HCL
                     names (see docs/governance.md).
` + apiOptionsHelp)
}

func (c *GroupCreateCommand) Synopsis() string { return "Create a group" }

func (c *GroupCreateCommand) Run(args []string) int {
	var req client.GroupRequest
	var argList, env stringList
	var govFile string
	fs, opts := c.apiFlagSet("group create")
	fs.StringVar(&req.Bundle, "bundle", "", "")
	fs.StringVar(&req.Command, "command", "", "")
	fs.Var(&argList, "arg", "")
	fs.Var(&env, "env", "")
	fs.StringVar(&req.Builtin, "builtin", "", "")
	fs.StringVar(&req.Runtime, "runtime", "", "")
	fs.StringVar(&req.Interpreter, "interpreter", "", "")
	fs.IntVar(&req.Workers, "workers", 1, "")
	fs.IntVar(&req.MemoryMaxMB, "memory-max-mb", 0, "")
	var limits client.GroupLimits
	fs.Int64Var(&limits.MaxPageBytes, "max-page-bytes", 0, "")
	fs.Int64Var(&limits.MaxPersonBytes, "max-person-bytes", 0, "")
	var perConn, perPerson int
	fs.IntVar(&perConn, "max-pages-per-conn", 0, "")
	fs.IntVar(&perPerson, "max-pages-per-person", 0, "")
	fs.StringVar(&govFile, "governance", "", "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	req.Args = argList
	limits.MaxPagesPerConn, limits.MaxPagesPerPerson = int32(min(perConn, 1<<30)), int32(min(perPerson, 1<<30))
	if limits != (client.GroupLimits{}) {
		req.Limits = &limits
	}
	var err error
	if req.Env, err = keyValues("-env", env); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	if govFile != "" {
		b, err := os.ReadFile(govFile)
		if err != nil {
			return c.fail(fmt.Errorf("reading -governance: %w", err))
		}
		if err := json.Unmarshal(b, &req.Governance); err != nil {
			return c.fail(fmt.Errorf("-governance %s: %w", govFile, err))
		}
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		// The recipe as stored is not shown: an answer that does not
		// decode is no failure.
		if _, err := api.CreateGroup(ctx, pos[0], req); !answered(err) {
			return c.fail(fmt.Errorf("creating group %s: %w", pos[0], err))
		}
		c.UI.Output(fmt.Sprintf("Group %s created; every agent starts its workers. Promote it with: stickyd group promote %s", pos[0], pos[0]))
		return 0
	})
}

// keyValues reads repeated KEY=VALUE flags; nil when there are none.
func keyValues(flag string, list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, kv)
		}
		out[k] = v
	}
	return out, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
