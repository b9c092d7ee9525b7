package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// watchMode runs one client-go informer (a reflector: list, watch from the last resourceVersion,
// resume a watch that ends, relist on 410 Expired) on the namespace's FooHealths until SIGTERM or
// SIGINT, and prints, one JSON object a line on stdout, every request the reflector made and every
// event its handler was told: what a disruption test reads to prove how client-go itself came
// through (tests/e2e/test_disruptions.py). WatchList stays off (the gate's default in this
// client-go): list, then watch.
//
//	{"request":"list"|"watch","resourceVersion":"…","status":200}  (status 0: no answer, see error)
//	{"watchEnded":"…"}  (a watch's stream ended with this error: the server went, or the client closed it)
//	{"event":"ADDED"|"MODIFIED"|"DELETED","name":"…","resourceVersion":"…"}
//	{"watchError":"…","expired":true}  (the reflector's watch error handler: expired means a relist)
//	{"synced":true}
func watchMode(config *rest.Config, namespace string) {
	out := &lines{enc: json.NewEncoder(os.Stdout)}
	config = rest.CopyConfig(config)
	config.Wrap(func(next http.RoundTripper) http.RoundTripper { return printing{next, out} })
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		fail("clients: %v", err)
	}
	informer := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, namespace, nil).ForResource(healthGVR).Informer()
	event := func(kind string) func(obj any) {
		return func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				out.print(map[string]any{"event": kind, "name": m.GetName(), "resourceVersion": m.GetResourceVersion()})
			}
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    event("ADDED"),
		UpdateFunc: func(_, obj any) { event("MODIFIED")(obj) },
		DeleteFunc: event("DELETED"),
	}
	if _, err := informer.AddEventHandler(handler); err != nil {
		fail("handler: %v", err)
	}
	err = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		out.print(map[string]any{"watchError": err.Error(), "expired": apierrors.IsResourceExpired(err) || apierrors.IsGone(err)})
		cache.DefaultWatchErrorHandler(ctx, r, err) // its log line and nothing else: the reflector relists by itself
	})
	if err != nil {
		fail("watch error handler: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go informer.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		out.print(map[string]any{"synced": true})
	}
	<-ctx.Done()
}

// lines writes JSON lines from any goroutine, one whole line at a time.
type lines struct {
	sync.Mutex
	enc *json.Encoder
}

func (l *lines) print(v any) {
	l.Lock()
	defer l.Unlock()
	_ = l.enc.Encode(v)
}

// printing prints each FooHealth list and watch request the reflector makes, with its answer's code.
type printing struct {
	next http.RoundTripper
	out  *lines
}

func (p printing) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(req)
	if !strings.HasSuffix(req.URL.Path, "/"+healthGVR.Resource) {
		return resp, err
	}
	line := map[string]any{"request": "list", "resourceVersion": req.URL.Query().Get("resourceVersion"), "status": 0}
	if req.URL.Query().Get("watch") == "true" {
		line["request"] = "watch"
	}
	if err != nil {
		line["error"] = err.Error()
	} else {
		line["status"] = resp.StatusCode
		if line["request"] == "watch" {
			resp.Body = &watchBody{ReadCloser: resp.Body, out: p.out}
		}
	}
	p.out.print(line)
	return resp, err
}

// watchBody prints how a watch's stream ended, once: client-go's decoder reads it to its end.
type watchBody struct {
	io.ReadCloser
	out   *lines
	ended sync.Once
}

func (b *watchBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if err != nil {
		b.ended.Do(func() { b.out.print(map[string]any{"watchEnded": err.Error()}) })
	}
	return n, err
}
