// Package status is `wavegate status`: a tree of sequences -> groups -> members with readiness,
// wait Job state, gated pods and teardown holds, for a terminal or as JSON.
package status

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wavev1 "wavegate.io/wavegate/pkg/api/v1alpha1"
	"wavegate.io/wavegate/pkg/members"
	"wavegate.io/wavegate/pkg/policy"
	"wavegate.io/wavegate/pkg/readiness"
	"wavegate.io/wavegate/pkg/resolve"
	"wavegate.io/wavegate/pkg/sequence"
	"wavegate.io/wavegate/pkg/teardown"
)

// Sequence is one sequence in the report.
type Sequence struct {
	Name   string  `json:"name"`
	Ready  bool    `json:"ready"`
	Reason string  `json:"reason,omitempty"`
	Groups []Group `json:"groups"`
	// Problems are what the Sequence's conditions report beyond readiness: dependency inversions
	// (a member waits on an object of a later group) and teardown holds.
	Problems []string `json:"problems,omitempty"`
}

// Group is one group of a sequence.
type Group struct {
	Name        string   `json:"name"`
	Order       int32    `json:"order"`
	Phase       string   `json:"phase"`
	Ready       int32    `json:"ready"`
	Members     int32    `json:"members"`
	WaitJob     string   `json:"waitJob,omitempty"`
	GatedPods   int32    `json:"gatedPods,omitempty"`
	Terminating int32    `json:"terminating,omitempty"`
	Held        int32    `json:"held,omitempty"`
	Message     string   `json:"message,omitempty"`
	Objects     []Object `json:"objects,omitempty"`
}

// Object is one member.
type Object struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Ready     string `json:"ready"`
	Message   string `json:"message,omitempty"`
	Deleting  bool   `json:"deleting,omitempty"`
}

// Render writes the report as a tree.
func Render(w io.Writer, seqs []Sequence) {
	if len(seqs) == 0 {
		fmt.Fprintln(w, "no sequences")
		return
	}
	for i, s := range seqs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		state := "Ready"
		if !s.Ready {
			state = "NotReady"
			if s.Reason != "" {
				state += " (" + s.Reason + ")"
			}
		}
		fmt.Fprintf(w, "sequence %s  %s\n", s.Name, state)
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  ! %s\n", p)
		}
		for gi, g := range s.Groups {
			branch, indent := "├─", "│  "
			if gi == len(s.Groups)-1 {
				branch, indent = "└─", "   "
			}
			var extra []string
			if g.WaitJob != "" {
				extra = append(extra, "wait Job "+g.WaitJob)
			}
			if g.GatedPods > 0 {
				extra = append(extra, fmt.Sprintf("%d pods gated", g.GatedPods))
			}
			if g.Terminating > 0 {
				extra = append(extra, fmt.Sprintf("%d terminating", g.Terminating))
			}
			if g.Held > 0 {
				extra = append(extra, fmt.Sprintf("%d held for teardown", g.Held))
			}
			fmt.Fprintf(w, "%s %s (order %d)  %s  %d/%d ready", branch, g.Name, g.Order, g.Phase, g.Ready, g.Members)
			if len(extra) > 0 {
				fmt.Fprintf(w, "  [%s]", strings.Join(extra, ", "))
			}
			fmt.Fprintln(w)
			if g.Message != "" && g.Phase != string(wavev1.GroupReleased) {
				fmt.Fprintf(w, "%s   %s\n", indent, g.Message)
			}
			for oi, o := range g.Objects {
				ob := "├─"
				if oi == len(g.Objects)-1 {
					ob = "└─"
				}
				name := o.Name
				if o.Namespace != "" {
					name = o.Namespace + "/" + o.Name
				}
				line := fmt.Sprintf("%s%s %s %s  %s", indent, ob, o.Kind, name, o.Ready)
				if o.Deleting {
					line += " (deleting)"
				}
				if o.Message != "" && o.Ready != string(readiness.Ready) {
					line += ": " + o.Message
				}
				fmt.Fprintln(w, line)
			}
		}
	}
}

// Collector reads the report from a cluster.
type Collector struct {
	Client    client.Client
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
}

// Collect reads the sequences (all, those with members in namespace, or the one named).
func (c *Collector) Collect(ctx context.Context, namespace, name string) ([]Sequence, error) {
	var list wavev1.SequenceList
	if err := c.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing Sequences (is wavegate installed?): %w", err)
	}
	var policies wavev1.WavePolicyList
	_ = c.Client.List(ctx, &policies)
	// Groups and readiness are resolved exactly as admission and the controller do: every policy
	// group label, the policies that apply to each namespace, their readiness rules.
	idx := policy.Compile(policies.Items)
	env := readiness.ClientEnv{Reader: c.Client, Ctx: ctx}
	nsLabels := map[string]map[string]string{}
	resolution := func(o *unstructured.Unstructured, namespaced bool) *resolve.Resolution {
		ns := ""
		if namespaced {
			ns = o.GetNamespace()
			if _, ok := nsLabels[ns]; !ok {
				n := &corev1.Namespace{}
				if err := c.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err == nil {
					nsLabels[ns] = n.Labels
				} else {
					nsLabels[ns] = nil
				}
			}
		}
		res, errs := resolve.Resolve(resolve.Object{Namespace: ns, NamespaceLabels: nsLabels[ns], Labels: o.GetLabels()}, idx)
		if len(errs) > 0 {
			return nil
		}
		return res
	}
	kinds, err := c.kinds()
	if err != nil {
		return nil, err
	}
	var out []Sequence
	for _, s := range list.Items {
		seq := s.Spec.Sequence
		if name != "" && seq != name {
			continue
		}
		objs, err := c.members(ctx, kinds, seq, idx.GroupLabels())
		if err != nil {
			return nil, err
		}
		if namespace != "" && seq != namespace && !slices.ContainsFunc(objs, func(o memberObject) bool { return o.GetNamespace() == namespace }) {
			continue
		}
		rs := Sequence{Name: seq, Ready: true}
		for _, c := range s.Status.Conditions {
			if (c.Type == sequence.ConditionDependencyInversion || c.Type == teardown.ConditionHeld) && c.Status == metav1.ConditionTrue {
				rs.Problems = append(rs.Problems, c.Type+": "+c.Message)
			}
			if c.Type == "Ready" && c.Status != metav1.ConditionTrue {
				rs.Ready, rs.Reason = false, c.Reason
			}
		}
		for _, g := range s.Status.Groups {
			gs := Group{Name: g.Name, Order: g.Order, Phase: string(g.Phase), Ready: g.Ready, Members: g.Members, WaitJob: g.WaitJob,
				GatedPods: g.GatedPods, Terminating: g.Terminating, Held: g.Held, Message: g.Message}
			for _, o := range objs {
				res := resolution(o.Unstructured, o.namespaced)
				if res == nil || res.Group != g.Name {
					continue
				}
				checker := idx.Checker("")
				if res.Policy != nil {
					checker = idx.Checker(res.Policy.Policy)
				}
				r := checker.CheckIn(o.Unstructured, env)
				gs.Objects = append(gs.Objects, Object{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(),
					Ready: string(r.Status), Message: r.Message, Deleting: o.GetDeletionTimestamp() != nil})
			}
			sort.Slice(gs.Objects, func(i, j int) bool {
				return gs.Objects[i].Kind+gs.Objects[i].Name < gs.Objects[j].Kind+gs.Objects[j].Name
			})
			rs.Groups = append(rs.Groups, gs)
		}
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (c *Collector) kinds() ([]members.Kind, error) {
	return members.Discover(c.Discovery, "list")
}

type memberObject struct {
	*unstructured.Unstructured
	namespaced bool
}

// members lists the members of a sequence by every group label, as the controller's tracker does.
func (c *Collector) members(ctx context.Context, kinds []members.Kind, seq string, groupLabels []string) ([]memberObject, error) {
	var out []memberObject
	for _, k := range kinds {
		for _, l := range groupLabels {
			list, err := c.Dynamic.Resource(k.GVR).List(ctx, metav1.ListOptions{LabelSelector: members.Selector(l)})
			if err != nil {
				break // a kind we may not list: leave it out
			}
			for i := range list.Items {
				o := &list.Items[i]
				if members.IsMember(o) && members.SequenceOf(o) == seq {
					out = append(out, memberObject{o, k.Namespaced})
				}
			}
		}
	}
	return out, nil
}
