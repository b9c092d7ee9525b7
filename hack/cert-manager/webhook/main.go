// Command webhook runs cert-manager's own admission webhook (validation of every cert-manager.io
// and acme.cert-manager.io resource, the CertificateRequest identity and approval checks), as
// cert-manager's cmd/webhook does: its configuration and flags from pkg/webhook/options, its
// server from internal/webhook, its serving certificate from a CA it keeps in a Secret
// (--dynamic-serving-ca-secret-name), which cainjector copies into the webhook configurations'
// caBundle. That command's module is not on the Go module proxy, and the server is in an internal
// package: see go.mod for why this module may import it. For the e2e tests: no metrics listener
// unless asked (--metrics-listen-address), no leader election (it needs none).
package main

import (
	goflag "flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cert-manager/cert-manager/internal/webhook"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/webhook/options"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager webhook:", err)
		os.Exit(1)
	}
}

func run() error {
	config, err := options.NewWebhookConfiguration()
	if err != nil {
		return err
	}
	flags := pflag.NewFlagSet("webhook", pflag.ContinueOnError)
	options.AddConfigFlags(flags, config)
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	flags.AddGoFlagSet(klogFlags)
	if err := flags.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx := logf.NewContext(ctrl.SetupSignalHandler(), klog.Background(), "webhook")
	server, err := webhook.NewCertManagerWebhookServer(klog.Background(), *config)
	if err != nil {
		return err
	}
	klog.InfoS("cert-manager webhook running", "port", config.SecurePort)
	return server.Run(ctx)
}
