// Command list-rules checks, through kube-apiserver and with client-go, every rule of a list:
// resourceVersion unset, "0" and R with resourceVersionMatch NotOlderThan and Exact, the 422s of
// resourceVersionMatch, a resourceVersion too large (504 after a wait), limit/continue pages from
// one snapshot with remainingItemCount, a continue token too old (410) and invalid values — by
// raw lists (dynamic client and REST), client-go's pager, and informers with WatchList off and on.
//
// Each check runs against a resource kube-apiserver serves itself (Foos: the reference) and
// against FooHealths (insights.samplecontroller.k8s.io, served by foo-operator's insights server
// behind its APIService), and prints the two answers side by side. It exits 1 when an answer
// breaks the rule: where the rule allows two answers (the state at R, or 410 Gone), either
// passes; else both answers must be of the same kind (code, reason, causes; for a 200 what the
// list holds). tests/e2e/test_client_go_lists.py runs it; hack/build.sh builds it. With --watch
// it is a FooHealth watcher instead (watch.go), for tests/e2e/test_disruptions.py.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

var (
	fooGVR    = schema.GroupVersionResource{Group: "samplecontroller.k8s.io", Version: "v1", Resource: "foos"}
	healthGVR = schema.GroupVersionResource{Group: "insights.samplecontroller.k8s.io", Version: "v1alpha1", Resource: "foohealths"}
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the plane (admin)")
	namespace := flag.String("namespace", "", "namespace to make Foos in (it should be empty)")
	only := flag.String("only", "", "run only the checks whose rule matches this regular expression")
	via := flag.String("via", "", "run only the checks made this way: raw, REST, pager or informer")
	objects := flag.Int("objects", 5, "Foos made before the checks (pages are 2 items)")
	watch := flag.Bool("watch", false, "instead of the checks, watch the namespace's FooHealths with an informer, printing JSON lines (watch.go)")
	klog.InitFlags(nil) // -v=4 shows why a reflector gave up a watch-list
	flag.Parse()
	installGates() // before any client: the reflector reads the gates when it is made
	if *namespace == "" {
		fail("--namespace is required")
	}
	filter, err := regexp.Compile(*only)
	if err != nil {
		fail("--only: %v", err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	if *watch {
		watchMode(config, *namespace)
		return
	}
	e, err := newEnv(config, *namespace)
	if err != nil {
		fail("clients: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := e.seed(ctx, *objects); err != nil {
		fail("making %d Foos in %s: %v", *objects, *namespace, err)
	}

	var results []result
	for _, c := range checks() {
		if !filter.MatchString(c.rule) || (*via != "" && c.via != *via) {
			continue
		}
		r := result{check: c}
		for i, s := range []*subject{e.kube, e.ours} {
			if err := e.settle(ctx, s); err != nil {
				r.answers[i] = answer{class: "not settled", detail: err.Error()}
				continue
			}
			began := time.Now()
			r.answers[i] = c.run(ctx, e, s)
			r.answers[i].took = time.Since(began)
			e.cleanup(ctx)
		}
		r.verdict = c.judge(r.answers[0], r.answers[1])
		printResult(r)
		results = append(results, r)
	}
	if !printSummary(results) {
		os.Exit(1)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "list-rules: "+format+"\n", args...)
	os.Exit(2)
}

// env is what every check gets: clients, the namespace, the two subjects, and the Foos it made.
// Informers get clients of their own whose requests are recorded (to tell how they listed).
type env struct {
	namespace string
	dyn       dynamic.Interface
	informDyn dynamic.Interface
	meta      metadata.Interface
	kube      *subject
	ours      *subject
	made      []string // Foos a check made, deleted after it
	serial    int
}

func newEnv(config *rest.Config, namespace string) (*env, error) {
	config = rest.CopyConfig(config)
	config.QPS, config.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	raw, err := rawClient(config)
	if err != nil {
		return nil, err
	}
	recorded := rest.CopyConfig(config)
	recorded.Wrap(recording)
	informDyn, err := dynamic.NewForConfig(recorded)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(recorded)
	if err != nil {
		return nil, err
	}
	e := &env{namespace: namespace, dyn: dyn, informDyn: informDyn, meta: meta}
	e.kube = &subject{label: "kube-apiserver (foos)", gvr: fooGVR, namespace: namespace, dyn: dyn, raw: raw}
	e.ours = &subject{label: "ours (foohealths)", gvr: healthGVR, namespace: namespace, dyn: dyn, raw: raw}
	return e, nil
}

// result is one check's two answers and the verdict on them.
type result struct {
	check   check
	answers [2]answer // kube-apiserver's, ours
	verdict string    // "" when the rule holds for both
}

func printResult(r result) {
	mark := "ok"
	if r.verdict != "" {
		mark = "DIFFERENT: " + r.verdict
	}
	fmt.Printf("[%s] %s\n", r.check.via, r.check.rule)
	for i, label := range []string{"kube-apiserver", "ours          "} {
		a := r.answers[i]
		fmt.Printf("    %s  %-44s %s (%.1fs)\n", label, a.class, oneLine(a.detail), a.took.Seconds())
	}
	fmt.Printf("    => %s\n", mark)
}

func printSummary(results []result) bool {
	agreed := 0
	fmt.Printf("\n%-8s | %-70s | %-40s | %-40s | %s\n", "via", "rule", "kube-apiserver", "ours", "verdict")
	fmt.Println(strings.Repeat("-", 180))
	for _, r := range results {
		verdict := "ok"
		if r.verdict != "" {
			verdict = "DIFFERENT"
		} else {
			agreed++
		}
		fmt.Printf("%-8s | %-70s | %-40s | %-40s | %s\n", r.check.via, r.check.rule, r.answers[0].class, r.answers[1].class, verdict)
	}
	fmt.Printf("\n%d of %d checks: ours answers within the rule, as kube-apiserver does\n", agreed, len(results))
	return agreed == len(results)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
