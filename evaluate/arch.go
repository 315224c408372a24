// Package evaluate holds the trusted checks that run inside the eval job
// (`nemorl-slurm evaluate check-weights|score`):
//
//   - CheckWeights streams model.safetensors once, in constant memory,
//     verifying its header, its offsets, its dtypes, its tensor names and
//     shapes against the pinned architecture, and that every value is
//     finite, while computing the file's sha256;
//   - Score turns NeMo Gym's AIME25 rollouts into the eval record after
//     strict checks (30 questions × 8 binary answers, no failed rollouts).
//
// A check that fails on the content it was given returns a *Rejection
// (the weights or the rollouts are bad); any other error is an I/O or usage
// problem (the check could not be done).
package evaluate

import (
	"fmt"
	"strconv"
)

// TensorSpec is one tensor the architecture expects.
type TensorSpec struct {
	Name  string
	Shape []int64
	// Optional tensors may be absent (a tied lm_head.weight). When present
	// they must have Shape.
	Optional bool
}

// Architecture is the exact tensor list a checkpoint must hold.
type Architecture struct {
	Name    string
	Tensors []TensorSpec
}

// Qwen2Config is the part of a Hugging Face Qwen2 config.json that fixes
// the tensor list of Qwen2ForCausalLM's state dict.
type Qwen2Config struct {
	Layers         int // num_hidden_layers
	Hidden         int // hidden_size
	Intermediate   int // intermediate_size
	Heads          int // num_attention_heads
	KVHeads        int // num_key_value_heads
	HeadDim        int // hidden_size / num_attention_heads
	Vocab          int // vocab_size
	TiedEmbeddings bool
}

// Qwen25_1_5B_InstructConfig returns Qwen/Qwen2.5-1.5B-Instruct at revision
// 989aa7980e4cf806f80c7fef2b1adb7bc71aa306 (config.json: hidden_size 1536,
// intermediate_size 8960, num_hidden_layers 28, num_attention_heads 12,
// num_key_value_heads 2, vocab_size 151936, tie_word_embeddings true).
// A function, not a variable, so that nothing can alter the pin.
func Qwen25_1_5B_InstructConfig() Qwen2Config { return qwen25Config }

var qwen25Config = Qwen2Config{
	Layers: 28, Hidden: 1536, Intermediate: 8960, Heads: 12, KVHeads: 2,
	HeadDim: 128, Vocab: 151936, TiedEmbeddings: true,
}

// Qwen25_1_5B_Instruct returns the pinned architecture: 28 layers × 12
// tensors + embeddings + final norm = 338 tensors, plus lm_head.weight,
// optional because the embeddings are tied (1,543,714,304 parameters
// without it).
func Qwen25_1_5B_Instruct() Architecture {
	a, err := Qwen2Architecture("Qwen/Qwen2.5-1.5B-Instruct", qwen25Config)
	if err != nil {
		panic(err)
	}
	return a
}

// TinyQwen2Config returns a 2-layer Qwen2 of 1,480 parameters with the
// pinned model's structure (tied embeddings, GQA with biased q/k/v), for
// tests and the lab's stand-in stages.
func TinyQwen2Config() Qwen2Config { return tinyConfig }

var tinyConfig = Qwen2Config{
	Layers: 2, Hidden: 8, Intermediate: 16, Heads: 2, KVHeads: 1,
	HeadDim: 4, Vocab: 32, TiedEmbeddings: true,
}

// TinyQwen2 returns the architecture of TinyQwen2Config.
func TinyQwen2() Architecture {
	a, err := Qwen2Architecture("tiny-qwen2", tinyConfig)
	if err != nil {
		panic(err)
	}
	return a
}

// ArchitectureByName returns "qwen2.5-1.5b-instruct" (the pinned model)
// or "tiny-qwen2", for a command-line flag.
func ArchitectureByName(name string) (Architecture, error) {
	switch name {
	case "qwen2.5-1.5b-instruct":
		return Qwen25_1_5B_Instruct(), nil
	case "tiny-qwen2":
		return TinyQwen2(), nil
	}
	return Architecture{}, fmt.Errorf("evaluate: unknown architecture %q (want qwen2.5-1.5b-instruct or tiny-qwen2)", name)
}

// Qwen2Architecture returns the state-dict tensor list of Qwen2ForCausalLM
// (transformers) for c. q/k/v projections carry a bias, o_proj and the MLP
// do not; rotary inv_freq is a non-persistent buffer and not listed.
func Qwen2Architecture(name string, c Qwen2Config) (Architecture, error) {
	switch {
	case c.Layers < 1, c.Hidden < 1, c.Intermediate < 1, c.Heads < 1, c.KVHeads < 1, c.HeadDim < 1, c.Vocab < 1:
		return Architecture{}, fmt.Errorf("evaluate: Qwen2 config %+v: every size must be positive", c)
	case c.Heads*c.HeadDim != c.Hidden:
		return Architecture{}, fmt.Errorf("evaluate: Qwen2 config: heads %d × head_dim %d != hidden %d", c.Heads, c.HeadDim, c.Hidden)
	case c.Heads%c.KVHeads != 0:
		return Architecture{}, fmt.Errorf("evaluate: Qwen2 config: heads %d not a multiple of kv heads %d", c.Heads, c.KVHeads)
	}
	h, im, kv, v := int64(c.Hidden), int64(c.Intermediate), int64(c.KVHeads*c.HeadDim), int64(c.Vocab)
	a := Architecture{Name: name}
	add := func(name string, shape ...int64) {
		a.Tensors = append(a.Tensors, TensorSpec{Name: name, Shape: shape})
	}
	add("model.embed_tokens.weight", v, h)
	for i := range c.Layers {
		p := "model.layers." + strconv.Itoa(i) + "."
		add(p+"input_layernorm.weight", h)
		add(p+"mlp.down_proj.weight", h, im)
		add(p+"mlp.gate_proj.weight", im, h)
		add(p+"mlp.up_proj.weight", im, h)
		add(p+"post_attention_layernorm.weight", h)
		add(p+"self_attn.k_proj.bias", kv)
		add(p+"self_attn.k_proj.weight", kv, h)
		add(p+"self_attn.o_proj.weight", h, h)
		add(p+"self_attn.q_proj.bias", h)
		add(p+"self_attn.q_proj.weight", h, h)
		add(p+"self_attn.v_proj.bias", kv)
		add(p+"self_attn.v_proj.weight", kv, h)
	}
	add("model.norm.weight", h)
	a.Tensors = append(a.Tensors, TensorSpec{Name: "lm_head.weight", Shape: []int64{v, h}, Optional: c.TiedEmbeddings})
	return a, nil
}

// Parameters returns the number of parameters of the required tensors
// (optional ones excluded).
func (a Architecture) Parameters() int64 {
	var n int64
	for _, t := range a.Tensors {
		if !t.Optional {
			n += numElements(t.Shape)
		}
	}
	return n
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}
