package testagents

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// waitUntil polls cond until it returns nil or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sleepers returns the pids of processes running "sleep <arg>" whose
// environment mentions dir (Nomad puts the allocation's directory there), so
// sleeps of other tests running at the same time do not count.
func sleepers(arg, dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
		if len(args) != 2 || filepath.Base(string(args[0])) != "sleep" || string(args[1]) != arg {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestBinary(t *testing.T) {
	t.Run("env override", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "fake")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("STICKYD_FAKE_BIN", p)
		got, err := Binary("fake")
		if err != nil || got != p {
			t.Fatalf("Binary = %q, %v; want %q", got, err, p)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := Binary("no-such-agent")
		if err == nil || !strings.Contains(err.Error(), "bin/no-such-agent") {
			t.Fatalf("Binary error = %v; want one naming bin/no-such-agent", err)
		}
	})
}

func TestConsulAndNomad(t *testing.T) {
	const arg = "600"
	service := "testagents-sleep"

	var nomadDir string
	t.Run("agents", func(t *testing.T) {
		consul := StartConsul(t)
		nomad := StartNomad(t, NomadOptions{ConsulAddr: consul.HTTPAddr})
		nomadDir = nomad.Dir

		job := nomadapi.NewServiceJob("sleep", "sleep", "global", 50)
		job.AddDatacenter("*")
		task := nomadapi.NewTask("sleep", "raw_exec").
			SetConfig("command", "/bin/sleep").
			SetConfig("args", []string{arg})
		group := nomadapi.NewTaskGroup("sleep", 1).AddTask(task)
		group.Services = []*nomadapi.Service{{Name: service, Provider: "consul"}}
		job.AddTaskGroup(group)
		if _, _, err := nomad.Client().Jobs().Register(job, nil); err != nil {
			t.Fatalf("registering job: %v", err)
		}

		waitUntil(t, 60*time.Second, "the allocation to run", func() error {
			allocs, _, err := nomad.Client().Jobs().Allocations("sleep", false, nil)
			if err != nil {
				return err
			}
			for _, a := range allocs {
				if a.ClientStatus == "running" {
					return nil
				}
			}
			return fmt.Errorf("%d allocations, none running", len(allocs))
		})
		waitUntil(t, 30*time.Second, "the sleep process", func() error {
			if len(sleepers(arg, nomad.Dir)) != 1 {
				return fmt.Errorf("sleep %s processes: %v", arg, sleepers(arg, nomad.Dir))
			}
			return nil
		})
		waitUntil(t, 30*time.Second, "the service in Consul's catalog", func() error {
			svcs, _, err := consul.Client().Catalog().Service(service, "", nil)
			if err != nil {
				return err
			}
			if len(svcs) != 1 {
				return fmt.Errorf("%d instances of %s", len(svcs), service)
			}
			return nil
		})

		// The nomad CLI works with Env.
		cmd := exec.Command(Require(t, "nomad"), "job", "status", "-short", "sleep")
		cmd.Env = nomad.Env()
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("running")) {
			t.Fatalf("nomad job status: %v\n%s", err, out)
		}
	})
	if t.Failed() {
		return
	}

	// The subtest's cleanup stopped both agents.
	if pids := sleepers(arg, nomadDir); len(pids) != 0 {
		t.Errorf("sleep %s still running after cleanup: %v", arg, pids)
	}
	if nomadDir != "" {
		if pids := killUnder(nomadDir); len(pids) != 0 {
			t.Errorf("processes left under the nomad dir: %v", pids)
		}
	}
}

func TestConsulACL(t *testing.T) {
	const token = "3f1e2a44-9a8e-4c1b-8d3b-6f6a2f0e9c11"
	consul := StartConsulACL(t, token)

	kv := &consulapi.KVPair{Key: "k", Value: []byte("v")}
	if _, err := consul.Client().KV().Put(kv, nil); err != nil {
		t.Fatalf("put with the management token: %v", err)
	}
	anon := *consul
	anon.Token = ""
	if _, err := anon.Client().KV().Put(kv, nil); err == nil {
		t.Fatal("put without a token succeeded; want permission denied")
	}
}

// A client agent joins the dev agent as a second node, in its own node
// pool.
func TestNomadClientJoins(t *testing.T) {
	Require(t, "nomad")
	consul := StartConsul(t)
	local := StartConsulClient(t, consul)
	n := StartNomad(t, NomadOptions{ConsulAddr: consul.HTTPAddr})
	c := StartNomadClient(t, n, ClientOptions{ConsulAddr: local.HTTPAddr, NodePool: "hosts"})
	members, err := consul.Client().Agent().Members(false)
	if err != nil || len(members) != 2 {
		t.Fatalf("consul members %v (%v), want the server and the client", len(members), err)
	}
	nodes, _, err := n.Client().Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]string{}
	for _, node := range nodes {
		pools[node.Name] = node.NodePool
	}
	if len(nodes) != 2 || pools[c.NodeName] != "hosts" || pools[n.NodeName] != "default" {
		t.Fatalf("nodes and their pools: %v", pools)
	}
}
