// Package sites prepares the existing sites under test/sites (a Django
// site, the Flask tutorial's app) for the tests that run them under
// stickyd (test/e2e over HTTP, test/browser in Chromium).
package sites

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Python is the interpreter the sites run on: Debian's, with Django,
// Flask, grpcio and protobuf from its packages (make deps).
const Python = "/usr/bin/python3"

// Importable says whether Python imports modules (a comma-separated list);
// if not, the error says what make deps installs.
func Importable(modules string) error {
	if out, err := exec.Command(Python, "-c", "import "+modules).CombinedOutput(); err != nil {
		return fmt.Errorf("%s cannot import %s (make deps installs python3-django, python3-flask, python3-grpcio and python3-protobuf): %v %s", Python, modules, err, out)
	}
	return nil
}

// DjangoSetup makes the Django site's database and its superuser (admin,
// secret-1) in data, as its README says; dir is test/sites/django_site,
// sdk the Python SDK (plugins/python).
func DjangoSetup(dir, sdk, data string) error {
	for _, args := range [][]string{
		{"migrate", "--noinput"},
		{"createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.org"},
	} {
		cmd := exec.Command(Python, append([]string{"manage.py"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "STICKYD_SITE_DATA="+data, "DJANGO_SUPERUSER_PASSWORD=secret-1",
			"PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("manage.py %s: %v\n%s", args[0], err, out)
		}
	}
	return nil
}

// Root is the repository's root, found from the working directory (a
// test's package directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
