// Command controller runs cert-manager's own controllers for the Certificate flows a webhook's
// CA chain needs (SelfSigned and CA issuers, approval, the certificate state machine), wired the
// way cert-manager's cmd/controller wires them. That command's module is not on the Go module
// proxy; the controllers are, in github.com/cert-manager/cert-manager itself. For the e2e tests:
// one replica, no leader election, no metrics or health listener.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each registers its controllers (controllerpkg.Register) or issuer type in init.
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers cert-manager's own binary enables by default, less ACME, Vault, Venafi,
// ClusterIssuers, the ingress/gateway shims and CertificateSigningRequests.
var controllers = []string{
	issuers.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	namespace := flag.String("namespace", "", "only this namespace (default: all)")
	workers := flag.Int("workers", 5, "workers per controller")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager controller:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string, workers int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "controller")

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig: kubeconfig, Namespace: namespace, KubernetesAPIQPS: 50, KubernetesAPIBurst: 100,
		// cert-manager's defaults for a failed request's backoff (1 h, doubling to 32 h).
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	// Every controller's Context shares these informer factories: start them once all
	// controllers have registered their informers.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	known := controllerpkg.Known()
	var running sync.WaitGroup
	errs := make(chan error, len(controllers))
	for _, name := range controllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		controller, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %q: %w", name, err)
		}
		running.Add(1)
		go func() {
			defer running.Done()
			if err := controller.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
				stop()
			}
		}()
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	klog.InfoS("cert-manager controllers running", "controllers", controllers)
	running.Wait()
	close(errs)
	return <-errs
}
