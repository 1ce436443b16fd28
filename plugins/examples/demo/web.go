package demo

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"path"
)

// The page and its assets are plain files embedded in the binary: no build
// step, nothing fetched from elsewhere, so the demo works offline.
var (
	//go:embed web/index.html
	indexHTML string
	//go:embed web/customer.html
	customerHTML string
	//go:embed web/static
	staticFS embed.FS

	indexTmpl    = template.Must(template.New("index").Parse(indexHTML))
	customerTmpl = template.Must(template.New("customer").Parse(customerHTML))
	assets       = loadAssets()
)

// asset is one file served under /assets/.
type asset struct {
	name string
	body []byte
	etag string
}

// loadAssets reads the embedded static files once; /assets/ serves these and
// nothing else.
func loadAssets() map[string]asset {
	out := map[string]asset{}
	entries, err := fs.ReadDir(staticFS, "web/static")
	if err != nil {
		panic("reading embedded assets: " + err.Error()) // the embed directive guarantees the folder
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := fs.ReadFile(staticFS, path.Join("web/static", e.Name()))
		if err != nil {
			panic("reading embedded asset " + e.Name() + ": " + err.Error())
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = asset{name: e.Name(), body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out
}

// indexData is what the page templates show before the client connects.
type indexData struct {
	InStickyd bool
	Worker    string
	Conn      string
	User      string
	// Customers are the seed customers, for the navigation.
	Customers []navCustomer
	// Customer is the id a customer page shows; Here is its own path, where
	// its login form comes back to.
	Customer string
	Here     string
}

// navCustomer is a link of the navigation.
type navCustomer struct {
	ID, Name string
}

func navCustomers() []navCustomer {
	out := make([]navCustomer, len(seedCustomers))
	for i, s := range seedCustomers {
		out[i] = navCustomer{ID: s.id, Name: s.c.Name}
	}
	return out
}

func renderIndex(d indexData) ([]byte, error) {
	return render(indexTmpl, d)
}

func renderCustomer(d indexData) ([]byte, error) {
	return render(customerTmpl, d)
}

func render(t *template.Template, d indexData) ([]byte, error) {
	d.Customers = navCustomers()
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
