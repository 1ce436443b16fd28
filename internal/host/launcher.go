package host

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// Launcher starts one worker process and opens its channel.
type Launcher interface {
	Launch(ctx context.Context, id string) (Process, channel.Conn, error)
}

// Process is a running worker.
type Process interface {
	// Pid is the OS process id, or 0 for an in-process worker.
	Pid() int
	// Kill stops the process, gracefully if it can. Idempotent.
	Kill()
}

// exitReporter is a Process that can tell how it ended ("exit status 2",
// "signal: killed"), waiting at most wait for the OS to report it.
type exitReporter interface {
	ExitStatus(wait time.Duration) string
}

// PluginLauncher starts workers as go-plugin subprocesses of Command.
type PluginLauncher struct {
	Command string
	Args    []string
	// Env is added to the agent's environment for the worker.
	Env []string
	// PlainChannel turns go-plugin's AutoMTLS off. By default the host
	// and the worker trade one-time certificates at the start and the
	// channel is mutual TLS: no other process of the machine can connect
	// to the worker's socket and speak for anyone.
	PlainChannel bool
	Logger       hclog.Logger
}

var _ Launcher = (*PluginLauncher)(nil)

// Launch starts the plugin binary and opens its channel. The channel lives
// until the process exits or is killed; ctx bounds only the start.
func (l *PluginLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	cmd := exec.Command(l.Command, l.Args...)
	cmd.Env = append(cmd.Environ(), l.Env...)
	cmd.Env = append(cmd.Env, "STICKYD_WORKER_ID="+id)
	setDeathSignal(cmd)
	return launchPlugin(ctx, id, l.Command, l.PlainChannel, l.Logger, func(c *plugin.ClientConfig) { c.Cmd = cmd }, cmd)
}

// launchPlugin starts a go-plugin worker (set gives the client its Cmd or
// its RunnerFunc; cmd, if not nil, is the process it runs) and opens its
// channel.
func launchPlugin(ctx context.Context, id, name string, plain bool, log hclog.Logger, set func(*plugin.ClientConfig), cmd *exec.Cmd) (Process, channel.Conn, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	// The app's own output (a Python worker's stderr, where its stdout
	// goes too; a Go worker's stdout and stderr, forwarded by go-plugin)
	// is logged at info, attributed to the worker.
	appLog := log.Named(id)
	stderr := newAppOutput(appLog, "stderr", true)
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  pluginHandshake,
		Plugins:          pluginSet,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           appLog,
		GRPCDialOptions:  channel.DialOptions(),
		AutoMTLS:         !plain,
		Managed:          false,
		Stderr:           stderr,
		SyncStdout:       newAppOutput(appLog, "stdout", false),
		SyncStderr:       newAppOutput(appLog, "stderr", false),
	}
	set(cfg)
	client := plugin.NewClient(cfg)
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		// go-plugin's words for a process that ended before its handshake
		// guess at the architecture; what the worker wrote says why (a
		// Python traceback, a missing module).
		stderr.Flush()
		if tail := stderr.Tail(); len(tail) > 0 {
			for i, line := range tail {
				tail[i] = readableLine(line)
			}
			return nil, nil, fmt.Errorf("starting worker plugin %q: the worker ended before its handshake, saying:\n  %s\n(go-plugin: %w)",
				name, strings.Join(tail, "\n  "), err)
		}
		return nil, nil, fmt.Errorf("starting worker plugin %q: %w", name, err)
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("dispensing worker plugin: %w", err)
	}
	cc, ok := raw.(*grpc.ClientConn)
	if !ok {
		client.Kill()
		return nil, nil, fmt.Errorf("worker plugin dispensed %T", raw)
	}
	// The stream must outlive ctx: it is the worker's channel for life.
	conn, err := channel.Dial(context.WithoutCancel(ctx), cc)
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("opening worker channel: %w", err)
	}
	pid := 0
	if rc := client.ReattachConfig(); rc != nil {
		pid = rc.Pid
	}
	return &pluginProcess{client: client, cmd: cmd, pid: pid, conn: conn}, conn, nil
}

type pluginProcess struct {
	client *plugin.Client
	cmd    *exec.Cmd
	pid    int
	conn   channel.Conn
	once   sync.Once
}

// ExitStatus reads the process's end once go-plugin has reaped it.
func (p *pluginProcess) ExitStatus(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for !p.client.Exited() {
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(10 * time.Millisecond)
	}
	// go-plugin sets Exited under its lock after cmd.Wait returned. A
	// worker forked from a template is no child of the agent's: its end
	// is not told.
	if p.cmd == nil {
		return ""
	}
	if st := p.cmd.ProcessState; st != nil {
		return st.String()
	}
	return ""
}

func (p *pluginProcess) Pid() int { return p.pid }

// Kill closes the channel and lets go-plugin stop the process (graceful,
// then forced after its timeout).
func (p *pluginProcess) Kill() {
	p.once.Do(func() {
		p.conn.Close()
		p.client.Kill()
	})
}

// InprocLauncher runs workers inside the agent on an in-memory channel, as
// stickyd dev does. The channel carries the same encoded bytes as gRPC.
type InprocLauncher struct {
	// Serve runs one worker on its end of the channel until the channel
	// closes or ctx ends (worker.InProcess builds it from an App).
	Serve func(ctx context.Context, c channel.Conn) error
}

var _ Launcher = (*InprocLauncher)(nil)

// Launch starts the app on a new in-memory channel.
func (l *InprocLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	hostEnd, workerEnd := channel.Pipe()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &inprocProcess{cancel: cancel, conn: hostEnd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_ = l.Serve(wctx, workerEnd)
	}()
	return p, hostEnd, nil
}

type inprocProcess struct {
	cancel context.CancelFunc
	conn   channel.Conn
	done   chan struct{}
}

func (p *inprocProcess) Pid() int { return 0 }

func (p *inprocProcess) Kill() {
	p.cancel()
	p.conn.Close()
	<-p.done
}
