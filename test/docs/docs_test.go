// Package docs_test checks that the README and docs/ say what the
// Makefile and the examples do.
package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The README names every Debian package make deps (run by make test)
// installs, says that it needs root or sudo, and points to make doctor.
func TestReadmeSaysWhatMakeTestInstalls(t *testing.T) {
	mk, readme := read(t, "Makefile"), read(t, "README.md")
	_, deps, ok := strings.Cut(mk, "\ndeps:")
	if !ok {
		t.Fatal("the Makefile has no deps target")
	}
	deps, _, _ = strings.Cut(deps, "\n\n") // the target's recipe
	install := regexp.MustCompile(`apt-get install -y ([^;\n]+);`)
	var pkgs []string
	for _, m := range install.FindAllStringSubmatch(deps, -1) {
		pkgs = append(pkgs, strings.Fields(m[1])...)
	}
	if len(pkgs) == 0 {
		t.Fatal("found no apt-get install in the Makefile")
	}
	for _, p := range pkgs {
		if !strings.Contains(readme, "`"+p+"`") {
			t.Errorf("make test installs %s; the README does not say so", p)
		}
	}
	for _, w := range []string{"sudo", "root", "make doctor"} {
		if !strings.Contains(readme, w) {
			t.Errorf("the README does not mention %q", w)
		}
	}
	if !strings.Contains(mk, "\ndoctor:") {
		t.Error("the README points to make doctor; the Makefile has no doctor target")
	}
}

// docs/terraform.md does not call a block of terraform/provider-example
// commented out while it is active.
func TestTerraformDocMatchesExample(t *testing.T) {
	doc, example := read(t, "docs/terraform.md"), read(t, "terraform/provider-example/main.tf")
	active := regexp.MustCompile(`(?m)^resource "(\w+)"`)
	for _, m := range active.FindAllStringSubmatch(example, -1) {
		said := regexp.MustCompile("`" + m[1] + "`" + `\s+block\s+commented\s+out`)
		if said.MatchString(doc) {
			t.Errorf("docs/terraform.md says the example's %s block is commented out; it is active", m[1])
		}
	}
	if !strings.Contains(example, `resource "stickyd_maintenance"`) || !strings.Contains(doc, "active `stickyd_maintenance` block") {
		t.Error("the example's maintenance window and the doc's word for it disagree")
	}
}

// docs/deploy-nomad.md packs its bundle outside the checkout: bundle pack
// -git . refuses a tree with files git does not know, and a build
// directory inside the checkout is one (.gitignore ignores bin/ and dist/
// only).
func TestNomadDocBuildsOutsideTheCheckout(t *testing.T) {
	doc := read(t, "docs/deploy-nomad.md")
	pack := regexp.MustCompile(`bundle pack -dir (\S+)`)
	ms := pack.FindAllStringSubmatch(doc, -1)
	if len(ms) == 0 {
		t.Fatal("docs/deploy-nomad.md packs no bundle")
	}
	for _, m := range ms {
		dir := m[1]
		if !strings.HasPrefix(dir, "$") && !strings.HasPrefix(dir, "/") {
			t.Errorf("docs/deploy-nomad.md packs from %s, inside the checkout: bundle pack -git . refuses it as a dirty tree", dir)
		}
	}
}
