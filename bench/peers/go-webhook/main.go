// The Go peer of foo-operator's webhook service for bench/: controller-runtime's webhook server
// and pkg/webhook/admission (CustomDefaulter and CustomValidator over unstructured Foos), plus a
// plain net/http conversion handler, all over TLS with the same certificates as ours.
//
//	go-webhook --cert-dir DIR --port 9443 --bind-address 127.0.0.1 [--http1]
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

var fooGK = schema.GroupKind{Group: group, Kind: "Foo"}

type fooDefaulter struct{ image string }

func (d fooDefaulter) Default(ctx context.Context, o runtime.Object) error {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("expected unstructured, got %T", o)
	}
	defaultFoo(u.Object, d.image)
	return nil
}

type fooValidator struct{}

func warnings(ctx context.Context) admission.Warnings {
	req, err := admission.RequestFromContext(ctx)
	if err == nil && req.RequestKind != nil && req.RequestKind.Version == "v1alpha1" {
		return admission.Warnings{legacyAPIVersion + " Foo is deprecated; use " + hubAPIVersion + " Foo"}
	}
	return nil
}

func (fooValidator) check(ctx context.Context, newObj, oldObj runtime.Object) (admission.Warnings, error) {
	u := newObj.(*unstructured.Unstructured)
	var old map[string]interface{}
	if oldObj != nil {
		old = oldObj.(*unstructured.Unstructured).Object
	}
	if errs := validateFoo(u.Object, old); len(errs) > 0 {
		return warnings(ctx), apierrors.NewInvalid(fooGK, u.GetName(), errs)
	}
	return warnings(ctx), nil
}

func (v fooValidator) ValidateCreate(ctx context.Context, o runtime.Object) (admission.Warnings, error) {
	return v.check(ctx, o, nil)
}

func (v fooValidator) ValidateUpdate(ctx context.Context, oldObj, newObj runtime.Object) (admission.Warnings, error) {
	return v.check(ctx, newObj, oldObj)
}

func (fooValidator) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {
	return nil, nil
}

// conversionReview is the part of apiextensions.k8s.io/v1 ConversionReview a converter reads;
// objects stay raw until each is decoded as unstructured JSON.
type conversionReview struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID               string            `json:"uid"`
		DesiredAPIVersion string            `json:"desiredAPIVersion"`
		Objects           []json.RawMessage `json:"objects"`
	} `json:"request"`
}

type conversionResponse struct {
	UID    string
	Result metav1.Status
}

// convert answers a ConversionReview: decode each object, convert it, encode it once.
func convert(w http.ResponseWriter, r *http.Request) {
	var review conversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not a ConversionReview", http.StatusBadRequest)
		return
	}
	response := conversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	converted := make([]json.RawMessage, 0, len(review.Request.Objects))
	for i, raw := range review.Request.Objects {
		var o map[string]interface{}
		err := json.Unmarshal(raw, &o)
		if err == nil {
			o, err = convertFoo(o, review.Request.DesiredAPIVersion)
		}
		var data []byte
		if err == nil {
			data, err = json.Marshal(o)
		}
		if err != nil {
			response.Result = metav1.Status{Status: metav1.StatusFailure, Message: fmt.Sprintf("object %d: %v", i, err)}
			converted = []json.RawMessage{}
			break
		}
		converted = append(converted, data)
	}
	// The envelope by hand: encoding/json would re-validate and compact every object again.
	head, err := json.Marshal(map[string]interface{}{"uid": response.UID, "result": response.Result})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var out bytes.Buffer
	out.Grow(len(review.Request.Objects) * 1024)
	out.WriteString(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":`)
	out.Write(head[:len(head)-1])
	out.WriteString(`,"convertedObjects":[`)
	for i, data := range converted {
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(data)
	}
	out.WriteString("]}}")
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(out.Bytes()); err != nil {
		ctrl.Log.Error(err, "writing conversion response")
	}
}

func main() {
	certDir := flag.String("cert-dir", "", "directory holding tls.crt and tls.key")
	port := flag.Int("port", 9443, "port to serve on")
	host := flag.String("bind-address", "127.0.0.1", "address to serve on")
	image := flag.String("default-image", "nginx:latest", "image given to Foos that name none")
	http1 := flag.Bool("http1", false, "offer only HTTP/1.1 in ALPN, as our webhook does (kubebuilder's --enable-http2=false)")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	_ = admissionv1.SchemeGroupVersion // the review types controller-runtime decodes

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	options := webhook.Options{
		Host: *host, Port: *port, CertDir: *certDir, CertName: "tls.crt", KeyName: "tls.key", WebhookMux: mux,
	}
	if *http1 {
		// controller-runtime offers only "h2" by default; clients that cannot speak it fall back
		// to HTTP/1.1 anyway, so replacing the list is what turns HTTP/2 off.
		options.TLSOpts = append(options.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	server := webhook.NewServer(options)
	scheme := runtime.NewScheme()
	foo := &unstructured.Unstructured{}
	foo.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Foo"})
	server.Register("/mutate-foo", admission.WithCustomDefaulter(scheme, foo, fooDefaulter{image: *image}))
	server.Register("/validate-foo", admission.WithCustomValidator(scheme, foo, fooValidator{}))
	server.Register("/convert", http.HandlerFunc(convert))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "go-webhook:", err)
		os.Exit(1)
	}
}
