package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// subject is one resource the checks run against.
type subject struct {
	label     string
	gvr       schema.GroupVersionResource
	namespace string
	dyn       dynamic.Interface
	raw       rest.Interface
}

func (s *subject) client() dynamic.ResourceInterface {
	return s.dyn.Resource(s.gvr).Namespace(s.namespace)
}

func (s *subject) list(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return s.client().List(ctx, opts)
}

// fresh is the newest state (a list with resourceVersion unset): its resourceVersion and names.
func (s *subject) fresh(ctx context.Context) (string, []string, error) {
	l, err := s.list(ctx, metav1.ListOptions{})
	if err != nil {
		return "", nil, err
	}
	return l.GetResourceVersion(), names(l), nil
}

// rawList sends the query as written (values client-go's ListOptions cannot carry, such as
// limit=abc), once: no retry after a 5xx with Retry-After (client-go's own clients retry ten
// times, so a 504 that took 3 s reaches them after ~40 s). A 200 is decoded as a list, any other
// answer as the Status it carries.
func (s *subject) rawList(ctx context.Context, query map[string]string) (*unstructured.UnstructuredList, error) {
	req := s.raw.Get().AbsPath("/apis", s.gvr.Group, s.gvr.Version, "namespaces", s.namespace, s.gvr.Resource).MaxRetries(0)
	for k, v := range query {
		req = req.Param(k, v)
	}
	body, err := req.Do(ctx).Raw()
	if err != nil {
		var status metav1.Status
		if json.Unmarshal(body, &status) == nil && status.Kind == "Status" {
			return nil, &apierrors.StatusError{ErrStatus: status}
		}
		return nil, err
	}
	l := &unstructured.UnstructuredList{}
	if err := l.UnmarshalJSON(body); err != nil {
		return nil, fmt.Errorf("200 that is no list: %v", err)
	}
	return l, nil
}

func rawClient(config *rest.Config) (rest.Interface, error) {
	config = rest.CopyConfig(config)
	config.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return rest.UnversionedRESTClientFor(config)
}

func names(l *unstructured.UnstructuredList) []string {
	out := make([]string, 0, len(l.Items))
	for _, item := range l.Items {
		out = append(out, item.GetName())
	}
	sort.Strings(out)
	return out
}

// answer is one server's answer to a check: class is what is compared, detail what is shown.
type answer struct {
	class  string
	detail string
	took   time.Duration
}

// refused turns an error into its kind: "<code> <reason> [<field> <cause type>, ...]".
func refused(err error) answer {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		class := fmt.Sprintf("%d %s", st.Code, st.Reason)
		if st.Details != nil && len(st.Details.Causes) > 0 {
			causes := make([]string, 0, len(st.Details.Causes))
			for _, c := range st.Details.Causes {
				causes = append(causes, strings.TrimSpace(c.Field+" "+string(c.Type)))
			}
			class += " [" + strings.Join(causes, ", ") + "]"
		}
		return answer{class: class, detail: st.Message}
	}
	return answer{class: "error", detail: err.Error()}
}

func rvNumber(rv string) (uint64, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	return n, err == nil
}

// ahead is a resourceVersion far beyond rv (both servers' versions are decimal integers).
func ahead(rv string) string {
	n, _ := rvNumber(rv)
	return strconv.FormatUint(n+1_000_000, 10)
}

func atLeast(rv, than string) bool {
	a, ok1 := rvNumber(rv)
	b, ok2 := rvNumber(than)
	return ok1 && ok2 && a >= b
}

// ---- the Foos the checks stand on ----------------------------------------------------------

func (e *env) foos() dynamic.ResourceInterface {
	return e.dyn.Resource(fooGVR).Namespace(e.namespace)
}

func (e *env) createFoo(ctx context.Context, name string) error {
	foo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "samplecontroller.k8s.io/v1",
		"kind":       "Foo",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"deployment": map[string]any{"name": name + "-nginx"}, "replicas": int64(1)},
	}}
	_, err := e.foos().Create(ctx, foo, metav1.CreateOptions{})
	return err
}

// change makes one more Foo, named to sort after every other, and waits until s shows it: a
// change each server has seen before the check goes on.
func (e *env) change(ctx context.Context, s *subject) (string, error) {
	e.serial++
	name := fmt.Sprintf("lr-z%03d", e.serial)
	if err := e.createFoo(ctx, name); err != nil {
		return "", err
	}
	e.made = append(e.made, name)
	return name, e.waitUntil(ctx, s, func(have []string) bool { return slices.Contains(have, name) })
}

func (e *env) seed(ctx context.Context, n int) error {
	for i := 1; i <= n; i++ {
		if err := e.createFoo(ctx, fmt.Sprintf("lr-%02d", i)); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until s lists exactly the Foos there are (insights follows them by informers).
func (e *env) settle(ctx context.Context, s *subject) error {
	_, want, err := e.kube.fresh(ctx)
	if err != nil {
		return err
	}
	return e.waitUntil(ctx, s, func(have []string) bool { return slices.Equal(have, want) })
}

func (e *env) waitUntil(ctx context.Context, s *subject, done func([]string) bool) error {
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, have, err := s.fresh(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // a server still starting: try again
		}
		last = have
		return done(have), nil
	})
	if err != nil {
		return fmt.Errorf("%s never showed the Foos (last: %v): %w", s.label, last, err)
	}
	return nil
}

// cleanup deletes the Foos a check made.
func (e *env) cleanup(ctx context.Context) {
	for _, name := range e.made {
		_ = e.foos().Delete(ctx, name, metav1.DeleteOptions{})
	}
	e.made = nil
}

// ---- what a check's client sent ------------------------------------------------------------

// requests records each request's method and query, to tell how an informer listed.
var requests struct {
	sync.Mutex
	seen []string
}

type recorder struct{ next http.RoundTripper }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	requests.Lock()
	requests.seen = append(requests.seen, req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery)
	requests.Unlock()
	return r.next.RoundTrip(req)
}

func recording(next http.RoundTripper) http.RoundTripper { return recorder{next} }

func resetRequests() {
	requests.Lock()
	requests.seen = nil
	requests.Unlock()
}

func requestsFor(resource string) []string {
	requests.Lock()
	defer requests.Unlock()
	var out []string
	for _, r := range requests.seen {
		if strings.Contains(r, "/"+resource+"?") {
			out = append(out, r)
		}
	}
	return out
}

func pollTimeout(ctx context.Context, timeout time.Duration, done func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, done)
}
