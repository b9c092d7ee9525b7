package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// check is one rule: how it is exercised (via), what it says, and which answers keep it.
type check struct {
	via  string // raw (dynamic client), REST (the query as written), pager, informer
	rule string
	// accept: the kinds of answer the rule allows (both servers' must be among them). Empty: the
	// rule is what kube-apiserver answers, and ours must be of the same kind.
	accept []string
	run    func(ctx context.Context, e *env, s *subject) answer
}

func (c check) judge(kube, ours answer) string {
	if len(c.accept) > 0 {
		var out []string
		if !slices.Contains(c.accept, kube.class) {
			out = append(out, "kube-apiserver outside the rule")
		}
		if !slices.Contains(c.accept, ours.class) {
			out = append(out, "ours outside the rule")
		}
		return strings.Join(out, "; ")
	}
	if kube.class != ours.class {
		return "ours is not kube-apiserver's kind of answer"
	}
	return ""
}

const (
	complete  = "200, every object"
	atR       = "200, the state at R"
	notOlder  = "200, not older than R"
	gone      = "410 Expired"
	snapshot  = "pages of one snapshot"
	limitFree = "200, every object (limit ignored)"
	paged     = "200, a page (limit kept)"
	tooLarge  = "504 Timeout [ResourceVersionTooLarge] after waiting"
	oldState  = "200, the state at the token's version"
	onePass   = "one snapshot"
	unsettled = "not settled"
)

func checks() []check {
	return slices.Concat(rawChecks(), restChecks(), pageChecks(), pagerChecks(), informerChecks())
}

// described is a list's answer in the words of its class, with what it held.
func described(class string, l *unstructured.UnstructuredList) answer {
	return answer{class: class, detail: fmt.Sprintf("rv=%s, %d items, continue=%q", l.GetResourceVersion(), len(l.Items), l.GetContinue())}
}

func listAnswer(l *unstructured.UnstructuredList, err error, judge func(*unstructured.UnstructuredList) string) answer {
	if err != nil {
		return refused(err)
	}
	return described(judge(l), l)
}

func rawChecks() []check {
	// lists answers a list with opts, R (and the names at R) given by a fresh list first.
	lists := func(opts func(rv string) metav1.ListOptions, judge func(l *unstructured.UnstructuredList, rv string, at []string) string) func(context.Context, *env, *subject) answer {
		return func(ctx context.Context, e *env, s *subject) answer {
			rv, at, err := s.fresh(ctx)
			if err != nil {
				return refused(err)
			}
			l, err := s.list(ctx, opts(rv))
			return listAnswer(l, err, func(l *unstructured.UnstructuredList) string { return judge(l, rv, at) })
		}
	}
	newest := func(l *unstructured.UnstructuredList, rv string, at []string) string {
		if slices.Equal(names(l), at) && atLeast(l.GetResourceVersion(), rv) {
			return complete
		}
		return "200, not the newest state"
	}
	notOlderThan := func(l *unstructured.UnstructuredList, rv string, at []string) string {
		if atLeast(l.GetResourceVersion(), rv) && slices.Equal(names(l), at) {
			return notOlder
		}
		return "200, older than R"
	}
	exactly := func(l *unstructured.UnstructuredList, rv string, at []string) string {
		if l.GetResourceVersion() == rv && slices.Equal(names(l), at) {
			return atR
		}
		return "200, not the state at R"
	}
	anyState := func(*unstructured.UnstructuredList, string, []string) string { return "200, some state" }
	// opts: resourceVersion "R" is the fresh list's, "R+10^6" far beyond it.
	opts := func(rv, match string) func(string) metav1.ListOptions {
		return func(r string) metav1.ListOptions {
			o := metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatch(match)}
			switch rv {
			case "R":
				o.ResourceVersion = r
			case "R+10^6":
				o.ResourceVersion = ahead(r)
			}
			return o
		}
	}
	// waited: one request (rawList: no retries), timed; a 504 must come after a wait, as
	// kube-apiserver waits ~3 s for its cache to reach R before it gives up.
	waited := func(opts func(string) metav1.ListOptions) func(context.Context, *env, *subject) answer {
		return func(ctx context.Context, e *env, s *subject) answer {
			rv, _, err := s.fresh(ctx)
			if err != nil {
				return refused(err)
			}
			o := opts(rv)
			query := map[string]string{"resourceVersion": o.ResourceVersion}
			if o.ResourceVersionMatch != "" {
				query["resourceVersionMatch"] = string(o.ResourceVersionMatch)
			}
			began := time.Now()
			l, err := s.rawList(ctx, query)
			var a answer
			if err != nil {
				a = refused(err)
			} else {
				a = described("200", l)
			}
			if time.Since(began) >= time.Second {
				a.class += " after waiting"
			} else {
				a.class += " at once"
			}
			return a
		}
	}
	return []check{
		{via: "raw", rule: "resourceVersion unset: the newest state", run: lists(opts("", ""), newest)},
		{via: "raw", rule: `resourceVersion="0": any state`, run: lists(opts("0", ""), anyState)},
		{via: "raw", rule: "resourceVersion=R: not older than R", run: lists(opts("R", ""), notOlderThan)},
		{via: "raw", rule: "resourceVersion=R, match=NotOlderThan: not older than R", run: lists(opts("R", "NotOlderThan"), notOlderThan)},
		{via: "raw", rule: "resourceVersion=R, match=Exact: the state at R", run: lists(opts("R", "Exact"), exactly)},
		{
			via: "raw", rule: "resourceVersion=R, match=Exact, after a change: the state at R, or 410",
			accept: []string{atR, gone},
			run: func(ctx context.Context, e *env, s *subject) answer {
				rv, at, err := s.fresh(ctx)
				if err != nil {
					return refused(err)
				}
				if _, err := e.change(ctx, s); err != nil {
					return answer{class: unsettled, detail: err.Error()}
				}
				l, err := s.list(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
				return listAnswer(l, err, func(l *unstructured.UnstructuredList) string { return exactly(l, rv, at) })
			},
		},
		{
			via: "raw", rule: "resourceVersion=R, match=NotOlderThan, after a change: not older than R",
			run: func(ctx context.Context, e *env, s *subject) answer {
				rv, _, err := s.fresh(ctx)
				if err != nil {
					return refused(err)
				}
				made, err := e.change(ctx, s)
				if err != nil {
					return answer{class: unsettled, detail: err.Error()}
				}
				l, err := s.list(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
				return listAnswer(l, err, func(l *unstructured.UnstructuredList) string {
					if !atLeast(l.GetResourceVersion(), rv) {
						return "200, older than R"
					}
					if slices.Contains(names(l), made) {
						return "200, not older than R (the change in it)"
					}
					return "200, not older than R (before the change)"
				})
			},
		},
		{via: "raw", rule: "match=NotOlderThan without resourceVersion: 422", run: lists(opts("", "NotOlderThan"), anyState)},
		{via: "raw", rule: "match=Exact without resourceVersion: 422", run: lists(opts("", "Exact"), anyState)},
		{via: "raw", rule: `resourceVersion="0", match=Exact: 422`, run: lists(opts("0", "Exact"), anyState)},
		{via: "raw", rule: "resourceVersion=R, match=Sometimes: 422 unsupported value", run: lists(opts("R", "Sometimes"), anyState)},
		{via: "raw", rule: "resourceVersion=R+10^6, match=NotOlderThan: 504 after ~3 s", run: waited(opts("R+10^6", "NotOlderThan"))},
		{via: "raw", rule: "resourceVersion=R+10^6 (no match): 504 after ~3 s", run: waited(opts("R+10^6", ""))},
		{via: "raw", rule: "resourceVersion=R+10^6, match=Exact", run: waited(opts("R+10^6", "Exact"))},
	}
}

// restChecks send values client-go's types cannot hold.
func restChecks() []check {
	query := func(q map[string]string) func(context.Context, *env, *subject) answer {
		return func(ctx context.Context, e *env, s *subject) answer {
			l, err := s.rawList(ctx, q)
			return listAnswer(l, err, func(*unstructured.UnstructuredList) string { return "200" })
		}
	}
	withToken := func(q map[string]string) func(context.Context, *env, *subject) answer {
		return func(ctx context.Context, e *env, s *subject) answer {
			rv, _, err := s.fresh(ctx)
			if err != nil {
				return refused(err)
			}
			first, err := s.list(ctx, metav1.ListOptions{Limit: 2})
			if err != nil {
				return refused(err)
			}
			full := map[string]string{"limit": "2", "continue": first.GetContinue()}
			for k, v := range q {
				full[k] = v
			}
			if full["resourceVersion"] == "R" {
				full["resourceVersion"] = rv
			}
			l, err := s.rawList(ctx, full)
			return listAnswer(l, err, func(*unstructured.UnstructuredList) string { return "200" })
		}
	}
	return []check{
		{via: "REST", rule: "resourceVersion=abc", run: query(map[string]string{"resourceVersion": "abc"})},
		{via: "REST", rule: "resourceVersion=² (a digit to Python, not to Go)", run: query(map[string]string{"resourceVersion": "²"})},
		{via: "REST", rule: "resourceVersion=-1", run: query(map[string]string{"resourceVersion": "-1"})},
		{via: "REST", rule: "resourceVersion=abc, match=Exact", run: query(map[string]string{"resourceVersion": "abc", "resourceVersionMatch": "Exact"})},
		{via: "REST", rule: "limit=abc", run: query(map[string]string{"limit": "abc"})},
		{via: "REST", rule: "limit=-1", run: query(map[string]string{"limit": "-1"})},
		{via: "REST", rule: "sendInitialEvents=true on a list: 422", run: query(map[string]string{"sendInitialEvents": "true"})},
		{via: "REST", rule: "continue=not-a-token: 400", run: query(map[string]string{"continue": "not-a-token"})},
		{via: "REST", rule: "continue with resourceVersion=R", run: withToken(map[string]string{"resourceVersion": "R"})},
		{via: "REST", rule: "continue with resourceVersion=R, match=NotOlderThan: 422", run: withToken(map[string]string{"resourceVersion": "R", "resourceVersionMatch": "NotOlderThan"})},
	}
}
