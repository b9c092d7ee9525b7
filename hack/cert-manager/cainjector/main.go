// Command cainjector runs cert-manager's CA injector: it fills the caBundle of webhook
// configurations, CRD conversion webhooks and APIServices annotated with
// cert-manager.io/inject-ca-from (a Certificate's Secret's ca.crt), as cert-manager's
// cmd/cainjector does. That command's module is not on the Go module proxy; the injector is,
// in github.com/cert-manager/cert-manager itself. For the e2e tests: one replica, no leader
// election, no metrics listener.
package main

import (
	"flag"
	"fmt"
	"os"

	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	// --kubeconfig is controller-runtime's own flag (registered by its config package).
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager cainjector:", err)
		os.Exit(1)
	}
}

func run() error {
	ctrl.SetLogger(klog.Background())
	config, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// Its field manager for the caBundle apply patches is the user agent's first word, as in
	// cert-manager's own cainjector: "cert-manager-cainjector".
	config = util.RestConfigWithUserAgent(config, "cainjector")
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiext.AddToScheme, apireg.AddToScheme, cmapi.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	manager, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	err = cainjector.RegisterAllInjectors(ctx, manager, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		// The names of cainjector.MutatingWebhookSetup and its siblings (unexported there).
		EnabledReconcilersFor: map[string]bool{
			"mutatingwebhookconfiguration": true, "validatingwebhookconfiguration": true,
			"apiservice": true, "customresourcedefinition": true,
		},
	})
	if err != nil {
		return err
	}
	klog.InfoS("cert-manager cainjector running")
	return manager.Start(ctx)
}
