// Command terraform-provider-stickyd is the Terraform provider for stickyd
// (internal/tfprovider). Terraform starts it; run it with -debug to attach a
// debugger (it prints the TF_REATTACH_PROVIDERS to set).
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/stickyd/stickyd/internal/tfprovider"
)

// version is the provider's version; a release sets it with
// -ldflags "-X main.version=...", like stickyd's own.
var version = "0.1.0-dev"

func main() {
	debug := flag.Bool("debug", false, "run for a debugger")
	flag.Parse()
	opts := providerserver.ServeOpts{Address: tfprovider.Address, Debug: *debug}
	if err := providerserver.Serve(context.Background(), tfprovider.New(version), opts); err != nil {
		log.Fatal(err)
	}
}
