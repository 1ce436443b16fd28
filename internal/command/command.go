// Package command is the stickyd command line: one file per subcommand, in
// the style of Nomad's command package. It parses flags and configuration
// and hands over to the agent or the API; it holds no product logic.
package command

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
)

// Version is the stickyd version, set at build time with
// -ldflags "-X github.com/stickyd/stickyd/internal/command.Version=...".
var Version = "0.1.0-dev"

// Run runs the command line and returns the exit code. builtins are the
// applications compiled into this binary, which groups (and stickyd dev)
// can run in-process.
func Run(args []string, builtins map[string]agent.Builtin) int {
	return RunWith(args, &cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}, builtins)
}

// RunWith runs the command line with the given UI (tests pass a mock).
func RunWith(args []string, ui cli.Ui, builtins map[string]agent.Builtin) int {
	return RunApp(args, ui, builtins, "")
}

// RunApp runs the command line of a binary built around one application:
// app, one of builtins, is what stickyd dev runs unless told otherwise
// ("" for the demo).
func RunApp(args []string, ui cli.Ui, builtins map[string]agent.Builtin, app string) int {
	meta := Meta{UI: ui, Builtins: builtins, DevApp: app}
	// Help and usage errors are gathered and handed to the UI once the
	// command returns, so they go where every other message goes (and a
	// test's MockUi sees them). cli renders help in several writes, so
	// the writers cannot pass each write to the UI as it comes.
	var help, errs bytes.Buffer
	defer func() {
		if s := strings.TrimRight(help.String(), "\n"); s != "" {
			ui.Output(s)
		}
		if s := strings.TrimRight(errs.String(), "\n"); s != "" {
			ui.Error(s)
		}
	}()
	c := &cli.CLI{
		Name:     "stickyd",
		Version:  versionString(),
		Args:     args,
		HelpFunc: cli.BasicHelpFunc("stickyd"),
		Commands: map[string]cli.CommandFactory{
			"agent":   func() (cli.Command, error) { return &AgentCommand{Meta: meta}, nil },
			"dev":     func() (cli.Command, error) { return &DevCommand{Meta: meta}, nil },
			"version": func() (cli.Command, error) { return &VersionCommand{Meta: meta}, nil },

			"tls":             func() (cli.Command, error) { return &TLSCommand{Meta: meta}, nil },
			"tls ca":          func() (cli.Command, error) { return &TLSCACommand{Meta: meta}, nil },
			"tls ca create":   func() (cli.Command, error) { return &TLSCACreateCommand{Meta: meta}, nil },
			"tls cert":        func() (cli.Command, error) { return &TLSCertCommand{Meta: meta}, nil },
			"tls cert create": func() (cli.Command, error) { return &TLSCertCreateCommand{Meta: meta}, nil },

			"user":         func() (cli.Command, error) { return &UserCommand{Meta: meta}, nil },
			"user list":    func() (cli.Command, error) { return &UserListCommand{Meta: meta}, nil },
			"user show":    func() (cli.Command, error) { return &UserShowCommand{Meta: meta}, nil },
			"user move":    func() (cli.Command, error) { return &UserMoveCommand{Meta: meta}, nil },
			"user forget":  func() (cli.Command, error) { return &UserForgetCommand{Meta: meta}, nil },
			"worker":       func() (cli.Command, error) { return &WorkerCommand{Meta: meta}, nil },
			"worker list":  func() (cli.Command, error) { return &WorkerListCommand{Meta: meta}, nil },
			"worker drain": func() (cli.Command, error) { return &WorkerDrainCommand{Meta: meta}, nil },

			"maintenance":        func() (cli.Command, error) { return &MaintenanceCommand{Meta: meta}, nil },
			"maintenance start":  func() (cli.Command, error) { return &MaintenanceStartCommand{Meta: meta}, nil },
			"maintenance end":    func() (cli.Command, error) { return &MaintenanceEndCommand{Meta: meta}, nil },
			"maintenance status": func() (cli.Command, error) { return &MaintenanceStatusCommand{Meta: meta}, nil },

			"gateway":        func() (cli.Command, error) { return &GatewayCommand{Meta: meta}, nil },
			"gateway usage":  func() (cli.Command, error) { return &GatewayUsageCommand{Meta: meta}, nil },
			"gateway health": func() (cli.Command, error) { return &GatewayHealthCommand{Meta: meta}, nil },

			"gateway key":           func() (cli.Command, error) { return &GatewayKeyCommand{Meta: meta}, nil },
			"gateway key create":    func() (cli.Command, error) { return &GatewayKeyCreateCommand{Meta: meta}, nil },
			"gateway key list":      func() (cli.Command, error) { return &GatewayKeyListCommand{Meta: meta}, nil },
			"gateway key revoke":    func() (cli.Command, error) { return &GatewayKeyRevokeCommand{Meta: meta}, nil },
			"gateway tenant":        func() (cli.Command, error) { return &GatewayTenantCommand{Meta: meta}, nil },
			"gateway tenant create": func() (cli.Command, error) { return &GatewayTenantCreateCommand{Meta: meta}, nil },
			"gateway tenant list":   func() (cli.Command, error) { return &GatewayTenantListCommand{Meta: meta}, nil },
			"gateway tenant set":    func() (cli.Command, error) { return &GatewayTenantSetCommand{Meta: meta}, nil },
			"gateway tenant delete": func() (cli.Command, error) { return &GatewayTenantDeleteCommand{Meta: meta}, nil },

			"bundle":        func() (cli.Command, error) { return &BundleCommand{Meta: meta}, nil },
			"bundle pack":   func() (cli.Command, error) { return &BundlePackCommand{Meta: meta}, nil },
			"bundle push":   func() (cli.Command, error) { return &BundlePushCommand{Meta: meta}, nil },
			"bundle verify": func() (cli.Command, error) { return &BundleVerifyCommand{Meta: meta}, nil },
			"bundle ls":     func() (cli.Command, error) { return &BundleLsCommand{Meta: meta}, nil },
			"bundle serve":  func() (cli.Command, error) { return &BundleServeCommand{Meta: meta}, nil },

			"group":          func() (cli.Command, error) { return &GroupCommand{Meta: meta}, nil },
			"group create":   func() (cli.Command, error) { return &GroupCreateCommand{Meta: meta}, nil },
			"group list":     func() (cli.Command, error) { return &GroupListCommand{Meta: meta}, nil },
			"group status":   func() (cli.Command, error) { return &GroupStatusCommand{Meta: meta}, nil },
			"group promote":  func() (cli.Command, error) { return &GroupPromoteCommand{Meta: meta}, nil },
			"group rollback": func() (cli.Command, error) { return &GroupRollbackCommand{Meta: meta}, nil },
			"group assign":   func() (cli.Command, error) { return &GroupAssignCommand{Meta: meta}, nil },
			"group unassign": func() (cli.Command, error) { return &GroupUnassignCommand{Meta: meta}, nil },
			"group retire":   func() (cli.Command, error) { return &GroupRetireCommand{Meta: meta}, nil },

			"status":                    func() (cli.Command, error) { return &StatusCommand{Meta: meta}, nil },
			"monitor":                   func() (cli.Command, error) { return &MonitorCommand{Meta: meta}, nil },
			"events":                    func() (cli.Command, error) { return &EventsCommand{Meta: meta}, nil },
			"server":                    func() (cli.Command, error) { return &ServerCommand{Meta: meta}, nil },
			"server members":            func() (cli.Command, error) { return &ServerMembersCommand{Meta: meta}, nil },
			"operator":                  func() (cli.Command, error) { return &OperatorCommand{Meta: meta}, nil },
			"operator raft":             func() (cli.Command, error) { return &OperatorRaftCommand{Meta: meta}, nil },
			"operator raft list-peers":  func() (cli.Command, error) { return &OperatorRaftListPeersCommand{Meta: meta}, nil },
			"operator teardown":         func() (cli.Command, error) { return &OperatorTeardownCommand{Meta: meta}, nil },
			"operator keyring":          func() (cli.Command, error) { return &OperatorKeyringCommand{Meta: meta}, nil },
			"operator keyring list":     func() (cli.Command, error) { return &OperatorKeyringListCommand{Meta: meta}, nil },
			"operator keyring rotate":   func() (cli.Command, error) { return &OperatorKeyringRotateCommand{Meta: meta}, nil },
			"operator snapshot":         func() (cli.Command, error) { return &OperatorSnapshotCommand{Meta: meta}, nil },
			"operator snapshot save":    func() (cli.Command, error) { return &OperatorSnapshotSaveCommand{Meta: meta}, nil },
			"operator raft remove-peer": func() (cli.Command, error) { return &OperatorRaftRemovePeerCommand{Meta: meta}, nil },
			"operator raft transfer-leader": func() (cli.Command, error) {
				return &OperatorRaftTransferLeaderCommand{Meta: meta}, nil
			},
		},
		HelpWriter:  &help,
		ErrorWriter: &errs,
	}
	code, err := c.Run()
	if err != nil {
		ui.Error(fmt.Sprintf("error: %v", err))
		return 1
	}
	if code == unknownCommand {
		// cli prints the usage alone; name what was not understood first.
		if sub := c.Subcommand(); sub != "" {
			usage := errs.String()
			errs.Reset()
			fmt.Fprintf(&errs, "unknown command %q\n\n%s", sub, usage)
		}
	}
	return code
}

// unknownCommand is the exit code cli returns for a command it does not
// know (as a shell does).
const unknownCommand = 127

// Meta is what every command shares.
type Meta struct {
	UI       cli.Ui
	Builtins map[string]agent.Builtin
	// DevApp is the builtin stickyd dev runs by default ("" for demo).
	DevApp string
	// Context, if set, stops a running agent (dev, agent) when it is
	// done, as SIGINT does; nil is never done. Tests set it.
	Context context.Context
}

// parent runs a command that only groups subcommands: alone it prints
// their list; with a word cli did not find under it, it names that word
// first ("stickyd user frobnicate").
func (m *Meta) parent(name string, args []string) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		m.UI.Error(fmt.Sprintf("unknown command %q\n", name+" "+args[0]))
	}
	return cli.RunResultHelp
}

// flagSet returns a FlagSet whose errors and usage go to the UI.
func (m *Meta) flagSet(name string, help func() string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { m.UI.Error(help()) }
	return fs
}

func (m *Meta) logger(name, level string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(level), Output: os.Stderr})
}

func validLevel(level string) bool {
	switch strings.ToLower(level) {
	case "trace", "debug", "info", "warn", "error":
		return true
	}
	return false
}
