package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// pluginHelperEnv makes the test binary a worker (TestMain): it serves
// go-plugin's protocol as the SDK does (channel.ServePlugin), greets the
// host on the channel it opens, writes a line to stdout and one to stderr,
// and holds the channel until the host closes it.
const pluginHelperEnv = "STICKYD_HOST_TEST_PLUGIN"

func servePluginHelper() int {
	log := hclog.New(&hclog.LoggerOptions{Name: "helper", JSONFormat: true})
	err := channel.ServePlugin(func(ctx context.Context, c channel.Conn) error {
		hello := &protocol.Hello{ProtocolVersion: protocol.Version, App: "helper", Pid: int64(os.Getpid())}
		if _, err := channel.Greet(ctx, c, hello); err != nil {
			return err
		}
		fmt.Println("a line on stdout")
		fmt.Fprintln(os.Stderr, "a line on stderr")
		<-ctx.Done()
		return nil
	}, log)
	if err != nil {
		log.Error("serving the plugin", "error", err)
		return 1
	}
	return 0
}

// logBuffer is a logger's output that tests read while it is written.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// go-plugin's client (the host's) and the SDK's side of its protocol
// (channel.ServePlugin, no go-plugin in the worker): with AutoMTLS and
// without, the host opens the channel, logs what the worker writes to
// stdout and stderr as the app's output, and Kill ends the process
// cleanly (exit status 0: the controller's Shutdown, not a forced kill).
func TestPluginLauncherRunsTheSDKsPluginServer(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "automtls", true: "plain"}[plain], func(t *testing.T) {
			var logs logBuffer
			l := &PluginLauncher{Command: os.Args[0], Env: []string{pluginHelperEnv + "=1"}, PlainChannel: plain,
				Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			p, conn, err := l.Launch(ctx, "w1")
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			hello, err := channel.Accept(ctx, conn, &protocol.HelloAck{WorkerId: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			if hello.App != "helper" || int(hello.Pid) != p.Pid() {
				t.Fatalf("hello %v from pid %d", hello, p.Pid())
			}
			for _, want := range []string{"a line on stdout: stream=stdout", "a line on stderr: stream=stderr"} {
				for !strings.Contains(logs.String(), want) {
					if ctx.Err() != nil {
						t.Fatalf("the host never logged %q:\n%s", want, logs.String())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			start := time.Now()
			p.Kill()
			if st := p.(exitReporter).ExitStatus(5 * time.Second); st != "exit status 0" {
				t.Fatalf("the worker ended with %q:\n%s", st, logs.String())
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Kill took %v", d)
			}
			if strings.Contains(logs.String(), "[WARN]") || strings.Contains(logs.String(), "[ERROR]") {
				t.Errorf("the host warned:\n%s", logs.String())
			}
		})
	}
}
