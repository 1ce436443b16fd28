package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

// listeners returns the addresses a process listens on, read from /proc:
// "unix://path" for its Unix sockets, "127.0.0.1:port" for its TCP ones.
func listeners(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	scan := func(file string, line func(f []string)) {
		fh, err := os.Open(file)
		if err != nil {
			return
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		sc.Scan() // the header
		for sc.Scan() {
			line(strings.Fields(sc.Text()))
		}
	}
	scan(fmt.Sprintf("/proc/%d/net/unix", pid), func(f []string) {
		// Num RefCount Protocol Flags Type St Inode Path; St 01: listening.
		if len(f) >= 8 && f[5] == "01" && inodes[f[6]] {
			out = append(out, "unix://"+f[7])
		}
	})
	tcp := func(f []string) {
		// sl local_address rem_address st ... inode (10th); st 0A: listen.
		if len(f) >= 10 && f[3] == "0A" && inodes[f[9]] {
			hexPort := f[1][strings.IndexByte(f[1], ':')+1:]
			port, _ := strconv.ParseUint(hexPort, 16, 16)
			out = append(out, fmt.Sprintf("127.0.0.1:%d", port))
		}
	}
	scan(fmt.Sprintf("/proc/%d/net/tcp", pid), tcp)
	scan(fmt.Sprintf("/proc/%d/net/tcp6", pid), tcp)
	return out
}

// speaksToStranger reports whether a worker's gRPC server at addr
// answers a process that is not its host: go-plugin's health check, which
// sits beside the channel and the controller whose Shutdown stops the
// worker.
func speaksToStranger(addr string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rep, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "plugin"}); err == nil {
		return fmt.Errorf("the worker at %s answered a stranger: %v", addr, rep.GetStatus())
	}
	return nil
}

// A worker's channel is go-plugin's AutoMTLS (one-time certificates traded
// at the start): another process of the machine that finds the worker's
// socket, Go's Unix socket or Python's TCP port, is refused at the
// handshake, while the host's own channel serves people. With the channel
// plain (PlainChannel), the same stranger is answered: the check can fail.
func TestWorkerChannelRefusesStrangers(t *testing.T) {
	root := pythonRepo(t)
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			a := startAgentWith(t, "subprocess", 1, withDataDir(t), func(c *agent.Config) {
				c.PythonSDK = filepath.Join(root, "plugins", "python")
				c.Groups[0].Plugin.PlainChannel = plain
				c.Groups = append(c.Groups, &agent.GroupConfig{Name: "py", Workers: 1, Plugin: &agent.PluginConfig{
					Runtime: "python3", Command: "pyshop.app:application", PlainChannel: plain,
					Env: map[string]string{"PYTHONPATH": filepath.Join(root, "plugins", "examples")}}})
			})
			pids := map[string]int{}
			waitFor(t, 30*time.Second, "both groups' workers", func() bool {
				for _, w := range a.Pool().Workers() {
					if w.State == host.StateReady && w.Pid != 0 {
						pids[w.Group] = w.Pid
					}
				}
				return pids["web"] != 0 && pids["py"] != 0
			})
			b := newBrowser(t, a)
			if code, body := b.do("POST", "/login?user=gus"); code != 200 {
				t.Fatalf("login: %d %s", code, body)
			}
			if ans := b.openTab("c").send(map[string]any{"op": "inc"}); ans.Op != "reply" {
				t.Fatalf("an op through the host: %+v", ans)
			}
			for group, pid := range pids {
				addrs := listeners(t, pid)
				if len(addrs) == 0 {
					fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
					var links []string
					for _, fd := range fds {
						l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
						links = append(links, l)
					}
					tcp, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
					t.Fatalf("worker %d of %s listens nowhere: %v\n%s", pid, group, links, tcp)
				}
				answered := 0
				for _, addr := range addrs {
					if err := speaksToStranger(addr); err != nil {
						answered++
						if !plain {
							t.Errorf("%s: %v", group, err)
						}
					}
				}
				if plain && answered == 0 {
					t.Errorf("%s: with a plain channel a stranger was not answered at %v: the check cannot fail", group, addrs)
				}
			}
		})
	}
}
