package agent

import (
	"testing"

	"github.com/stickyd/stickyd/plugins/worker"
)

func TestTemplateDirEnvIsTheSDKs(t *testing.T) {
	if templateDirEnv != worker.TemplateDirEnv {
		t.Fatalf("the agent sets %s, the SDK reads %s", templateDirEnv, worker.TemplateDirEnv)
	}
	a := &Agent{cfg: &Config{Name: "a", DataDir: "/data"}}
	env := a.workerEnv(recipe{Group: "web", Env: map[string]string{"X": "1"}})
	if len(env) != 2 || env[0] != templateDirEnv+"=/data/templates/web" || env[1] != "X=1" {
		t.Fatalf("worker env %v", env)
	}
	env = a.workerEnv(recipe{Group: "web", Env: map[string]string{templateDirEnv: "/elsewhere"}})
	if len(env) != 1 || env[0] != templateDirEnv+"=/elsewhere" {
		t.Fatalf("a recipe's own template dir: %v", env)
	}
}
