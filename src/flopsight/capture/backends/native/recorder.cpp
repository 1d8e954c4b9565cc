// flopsight's native op recorder: a RecordFunction callback that records, for each aten op
// a TorchDispatchMode would see, what the Python formulas need to cost it later.
//
// Which ops: RecordFunction fires for composite ops and for the ops they decompose into, and
// for the ops a meta kernel or a wrapper tensor subclass runs inside an op. An op is recorded
// only when it does not decompose before a dispatch mode would see it (it has no
// CompositeImplicitAutograd kernel, or it has a kernel of its own for its inputs' device, as
// silu_backward has for the CPU) and no op enclosing it on this thread was recorded. A
// composite op with a formula of its own that decomposes into no recorded op that has one
// (its kernel calls plain C++ functions, as max_pool1d's does on the CPU) is recorded whole.
// A unit (an operator Python counts whole from its arguments: an RNN cell, attention) is
// recorded whole too, with RecordFunction off on its thread while it runs: its parts are
// neither recorded nor pay RecordFunction's cost. So is a recorded op seen to run many parts
// (ops inside it, which are not recorded), when nothing else observes ops (on_enter).
//
// What: per op, its operator, a signature id (operator, input and output dtypes, shapes and
// scalar or list arguments), the autograd node running it (sequence number; for
// AccumulateGrad, the parameter), the sequence counter after it, and host stamps. The first
// op of each signature hands Python its signature, which Python decodes into meta tensors and
// arguments for the formulas: their cost serves every later op with the same signature.
// No tensor is kept past its op (a reference held would change what torch does, e.g. let
// AccumulateGrad no longer steal a gradient), except for the operators whose formulas read
// values (named at start) and for values a signature cannot describe (nested or sparse
// tensors): those ops keep their values until Python drains them. A signature whose formula
// Python found to read no value on one call (attention with no mask) keeps none after that.
//
// Claimed ops (the collectives and the ops around them, named at configure): Python handles each
// one as it returns, on its values (the source that claimed it watches the c10d Work it
// returns, so its completion is stamped from the backend's thread when it happens); they are
// rare (a few per step). Python charges what was recorded before one first, so it lands in
// order with the ops and module calls; it goes into no record, but counts as an op record
// for the blocks of memory around it (an op's temporaries are those freed before the next op
// record). What a claimed op's backend runs for it on its own threads (gloo divides an average there) is not
// recorded, as a dispatch mode does not see it: the op marks the thread's debug info, which
// c10d carries into those threads with the rest of its thread-local state.
//
// Tensor parallelism: an op on a DTensor is not this rank's work; the ops DTensor runs for it
// on the local shards are (and its redistributions' collectives). Such an op is not recorded
// and does not hide its parts, as the dispatch mode hands it to DTensor and sees what it runs.
// DTensor propagates shardings under a fake tensor mode: an op run under a fake mode that was
// not on when the session started is not run for real, and neither it nor its parts is recorded.
//
// Module boundaries: the two global module hooks are C++ functions too (see "module
// boundaries" below): a call of a module of the model becomes an enter and an exit record in
// the same stream, so Python replays the module stack in order with the ops.
//
// Stamps only (a timed pass: start(stamps=true)): the same ops are recorded, chosen the same
// way, with their host stamps and nothing else (no signature, no value, no claim: sig 0), so
// the operators are timed in the pass that times the modules, for little more than
// RecordFunction's own cost.
//
// Built with -DNDEBUG: RecordFunction's layout differs without it.
#include <ATen/SequenceNumber.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/PyObjectSlot.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <c10/util/Logging.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/utils/pybind.h>
#include <structmember.h>  // PyMemberDef's T_PYSSIZET (the module-call wrapper's vectorcall offset)

#include <algorithm>
#include <type_traits>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

struct Op {
  std::string name;      // "aten::addmm"
  std::string overload;  // "default" for the unnamed overload
  std::string key;       // the name pointer's string, to check a cache hit
  bool composite;        // has a CompositeImplicitAutograd kernel
  bool keep_values;      // its formula reads values: every op keeps them
  bool has_formula;      // the registry costs it (not free); a composite one is then a fallback
  bool unit;             // counted whole from its arguments
  bool claimed;          // handed to Python as it returns (see the top of this file)
  c10::optional<c10::OperatorHandle> handle;
  // per device type: -1 not looked up, else whether it has a kernel of its own there (a
  // composite op with one runs it instead of decomposing)
  std::array<int8_t, static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)> own_kernel;
};

constexpr int64_t kNoNode = INT64_MIN;

struct Record {
  int32_t op;
  int32_t sig;
  int64_t node_seq;  // INT64_MIN: no autograd node running; -1: AccumulateGrad
  int64_t seq_before, seq_after;  // the thread's sequence counter around it
  int64_t t0, t1;    // steady_clock nanoseconds
  intptr_t accumulated;  // AccumulateGrad's variable (TensorImpl*), else 0
};

struct Values {
  int32_t sig;
  std::string key;
  bool has_inputs, has_outputs;  // kept (else described by the key alone)
  std::vector<c10::IValue> inputs, outputs;
};

// per thread: the ops entered and not yet exited
struct Frame {
  bool recorded = false;
  bool fallback = false;      // a composite op recorded if nothing costed inside it is
  bool costed = false;
  uint64_t costed_before = 0;
  int exceptions = 0;  // std::uncaught_exceptions() when it began
  bool quiet = false;          // RecordFunction is off on its thread while it runs (see on_enter)
  bool rf_was_enabled = true;  // the state to restore then
  uint64_t parts_before = 0;   // ThreadState::parts when it began
  int64_t seq_before = 0;
  int32_t op = -1;
  int64_t t0 = 0, node_seq = kNoNode;
  intptr_t accumulated = 0;
  bool cacheable = true;
  bool keep = false;  // keep the values (see the top of this file)
  bool values_only = false;  // kept for its formula alone (its key describes it): see g_unread
  bool claimed = false;
  bool swallowed = false;  // not run for real: neither it nor its parts recorded (see the top)
  std::string key;
  std::vector<c10::IValue> inputs;
};

std::mutex g_lock;  // guards everything below that is not thread-local
std::vector<Op> g_ops;
std::unordered_map<const char*, int32_t> g_op_of;  // RecordFunction name pointer -> op
// signatures live as long as the operator names they were learnt under (see configure):
// a cost Python computed for one serves every later session
std::unordered_map<std::string, int32_t> g_sigs;
std::vector<std::string> g_sig_keys;  // signature id -> its key
std::unordered_set<std::string> g_value_ops;  // "aten::name.overload" whose formulas read values
// the signatures of such ops whose formulas read no value (an attention call with no mask):
// Python found so, costing one on its values; their ops keep nothing and share a signature id
std::unordered_set<std::string> g_unread;
std::unordered_set<std::string> g_formula_ops;  // "aten::name.overload" the registry costs (not free)
std::unordered_set<std::string> g_unit_ops;  // "aten::name.overload" counted whole
std::unordered_set<std::string> g_claimed_ops;  // "ns::name.overload" handed to Python as they return
PyObject* g_claim = nullptr;  // claim(op, inputs, outputs, t0 ns, t1 ns) while running (a new reference)
int32_t g_next_one_off = 0;  // ops costed on their own values get ids -1, -2, ...
std::vector<Record> g_records;
int64_t g_pending = 0;  // g_records.size(), readable from Python without a call (pending_view)
int64_t g_op_records = 0;  // under g_lock: op records pushed so far, and claimed ops
int64_t g_batch = 0;       // under g_lock: drains so far
std::vector<Values> g_values;
std::atomic<bool> g_on{false};
std::atomic<bool> g_stamps{false};  // stamps only (see the top of this file)
std::atomic<int64_t> g_generation{0};  // a new one per start: frames of an old session are ignored
c10::optional<at::CallbackHandle> g_handle;

std::atomic<int64_t> g_config{0};  // a new one per configure: what threads cached of g_ops is stale

// what a thread caches of the operator table, so that an op seen before takes no lock to look up
struct KnownOp {
  const char* name = nullptr;  // RecordFunction's name pointer
  std::string key;             // its string, to check a hit (as g_op_of does)
  int64_t config = -1;         // g_config when learnt
  int32_t id = -1;
  bool composite = false, keep_values = false, has_formula = false, unit = false, claimed = false;
};

// what a thread knows of an operator (per g_config): its last signature, so that an op
// repeated with the same one takes no lookup; how many parts (ops inside it, not recorded)
// its recorded runs had, so that one with many runs them without RecordFunction (on_enter)
struct PerOp {
  int64_t config = -1;
  std::string key;
  int32_t sig = -1;
  uint32_t runs = 0;
  uint64_t parts = 0;
};
constexpr uint32_t kQuietAfter = 4;  // runs observed before deciding
constexpr uint64_t kQuietParts = 3;  // parts per run from which turning RecordFunction off (two
                                     // rebuilds of its callback cache) costs less than their boxing

// per thread, in one thread_local (each access to one costs a call in a shared library)
struct ThreadState {
  std::vector<Frame> frames;
  size_t depth = 0;
  int recorded_depth = 0;
  uint64_t costed_total = 0;  // ops with a formula recorded on this thread
  int64_t generation = -1;
  std::array<KnownOp, 64> ops;  // by the name pointer's bits
  std::vector<PerOp> per_op;    // by operator id
  uint64_t parts = 0;           // ops begun inside a recorded op on this thread
};

PerOp& per_op(ThreadState& t, int32_t op) {
  if (t.per_op.size() <= static_cast<size_t>(op)) t.per_op.resize(op + 1);
  PerOp& known = t.per_op[op];
  int64_t config = g_config.load(std::memory_order_relaxed);
  if (known.config != config) {
    known = PerOp();
    known.config = config;
  }
  return known;
}
thread_local ThreadState t_state;

// the debug-info slot marking "inside a claimed op" (see the top of this file): a kind of our
// own where torch lets one be named, else the one slot torch leaves unused outside its tests
template <typename Kind>
Kind claimed_kind() {
  if constexpr (std::is_enum_v<Kind>) {
    return Kind::TEST_INFO_2;
  } else {
    static constexpr std::string_view name = "FLOPSIGHT_INSIDE_CLAIMED_OP";
    return Kind(&name);
  }
}
const c10::DebugInfoKind kInsideClaimed = claimed_kind<c10::DebugInfoKind>();
struct InsideClaimed final : c10::DebugInfoBase {};
std::atomic<bool> g_has_claims{false};  // some op is claimed: check the mark

// whether nothing but this recorder observes the ops on this thread, so that a recorded op's
// parts (which it does not record) may run without RecordFunction and its cost of boxing
// their arguments: no global callback when the session started (g_global_callbacks) and no
// profiler's state on the thread other than the memory tracking's own (g_own_state)
std::atomic<bool> g_global_callbacks{true};
std::atomic<const void*> g_own_state{nullptr};
bool alone() {
  if (g_global_callbacks.load(std::memory_order_relaxed)) return false;
  const void* state = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  return state == nullptr || state == g_own_state.load(std::memory_order_relaxed);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// the recorder's own time outside the ops it records: every callback's (op, module boundary,
// memory block) from its entry to its return, on every thread, since the last take_own_ns()
// (reset at start). A callback inside a recorded op's interval (its parts', the blocks it
// allocates) is in that op's time already, so not here: counted once. What RecordFunction
// spends around the callbacks (boxing the arguments, calling them) is not in it; a claimed
// op's Python handler is not either: Python times it as the profiler's own (overhead).
std::atomic<int64_t> g_own_ns{0};

// adds the time from its construction to its end (or to add_now()) to g_own_ns, when ``counted``
class OwnTime {
 public:
  explicit OwnTime(bool counted = true) : start_(counted ? now_ns() : 0) {}
  OwnTime(const OwnTime&) = delete;
  OwnTime& operator=(const OwnTime&) = delete;
  ~OwnTime() { add_now(); }
  // add the time so far, and nothing more: what follows is timed elsewhere
  void add_now() {
    if (start_ == 0) return;
    g_own_ns.fetch_add(now_ns() - start_, std::memory_order_relaxed);
    start_ = 0;
  }

 private:
  int64_t start_;
};

struct OpFlags {
  int32_t id;  // -1: not a dispatcher op (a named range)
  bool recorded, keep_values, fallback, costed, unit, claimed;
};

// the device of an op's first tensor input; false: it has none
bool device_of(c10::ArrayRef<const c10::IValue> inputs, c10::DeviceType& device) {
  for (const auto& v : inputs) {
    if (v.isTensor() && v.toTensor().defined()) {
      device = v.toTensor().device().type();
      return true;
    }
    if (v.isTensorList()) {
      for (const auto& t : v.toTensorList()) {
        const at::Tensor& tensor = t;
        if (tensor.defined()) {
          device = tensor.device().type();
          return true;
        }
      }
    }
  }
  return false;
}

// whether a composite op runs a kernel of its own on ``device`` instead of decomposing: a
// backend kernel (or the backend's own autograd kernel) takes precedence over
// CompositeImplicitAutograd
bool runs_own_kernel(Op& op, c10::DeviceType device) {
  auto& known = op.own_kernel[static_cast<size_t>(device)];
  if (known < 0) {
    auto backend = c10::computeDispatchKey(c10::nullopt, c10::kStrided, c10::Device(device));
    auto autograd = c10::getAutogradKeyFromBackend(c10::toBackendComponent(backend));
    known = op.handle && (op.handle->hasKernelForDispatchKey(backend) || op.handle->hasKernelForDispatchKey(autograd))
                ? 1
                : 0;
  }
  return known > 0;
}

OpFlags op_of_locked(const at::RecordFunction& fn, KnownOp& known);

// the flags of ``fn``'s operator: from this thread's cache when it knows the operator and it
// is not composite (whether one decomposes depends on its inputs' device), else from g_ops
OpFlags op_of(const at::RecordFunction& fn, ThreadState& t) {
  const char* name = fn.name();
  KnownOp& known = t.ops[(reinterpret_cast<uintptr_t>(name) >> 4) % t.ops.size()];
  if (known.name == name && !known.composite && known.config == g_config.load(std::memory_order_relaxed) &&
      known.key == name) {
    return OpFlags{known.id, true, known.keep_values, false, known.has_formula, known.unit, known.claimed};
  }
  return op_of_locked(fn, known);
}

OpFlags op_of_locked(const at::RecordFunction& fn, KnownOp& known) {
  const char* name = fn.name();
  std::lock_guard<std::mutex> guard(g_lock);
  int32_t id;
  auto it = g_op_of.find(name);
  if (it != g_op_of.end() && g_ops[it->second].key == name) {
    id = it->second;
  } else {
    auto op_name = fn.operator_name();
    if (!op_name) {
      return OpFlags{-1, false, false, false, false, false, false};
    }
    Op op;
    op.name = op_name->name;
    op.overload = op_name->overload_name.empty() ? "default" : op_name->overload_name;
    op.key = name;
    op.handle = c10::Dispatcher::singleton().findOp(*op_name);
    op.composite = op.handle && op.handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    op.keep_values = g_value_ops.count(op.name + "." + op.overload) > 0;
    op.has_formula = g_formula_ops.count(op.name + "." + op.overload) > 0;
    op.unit = g_unit_ops.count(op.name + "." + op.overload) > 0;
    op.claimed = g_claimed_ops.count(op.name + "." + op.overload) > 0;
    op.own_kernel.fill(-1);
    id = static_cast<int32_t>(g_ops.size());
    g_ops.push_back(std::move(op));
    g_op_of[name] = id;
  }
  Op& op = g_ops[id];
  known.name = name;
  known.key = op.key;
  known.config = g_config.load(std::memory_order_relaxed);
  known.id = id;
  known.composite = op.composite;
  known.keep_values = op.keep_values;
  known.has_formula = op.has_formula;
  known.unit = op.unit;
  known.claimed = op.claimed;
  // an op without tensor inputs reaches a dispatch mode whatever its kernels (its dispatch
  // keys come from the mode alone)
  c10::DeviceType device;
  bool recorded =
      op.unit || op.claimed || !op.composite || !device_of(fn.inputs(), device) || runs_own_kernel(op, device);
  return OpFlags{id, recorded, op.keep_values, !recorded && op.has_formula, op.has_formula, op.unit, op.claimed};
}

void append(std::string& key, const void* data, size_t n) {
  key.append(static_cast<const char*>(data), n);
}

template <typename T>
void append(std::string& key, T value) {
  append(key, &value, sizeof(T));
}

// a Python number torch wrapped in a 0-dim CPU tensor (``x + 1``), read without dispatching
c10::IValue wrapped_number(const at::Tensor& t) {
  const void* data = t.const_data_ptr();
  switch (t.scalar_type()) {
    case c10::ScalarType::Double:
      return c10::IValue(*static_cast<const double*>(data));
    case c10::ScalarType::Long:
      return c10::IValue(*static_cast<const int64_t*>(data));
    case c10::ScalarType::Bool:
      return c10::IValue(*static_cast<const bool*>(data));
    case c10::ScalarType::ComplexDouble:
      return c10::IValue(*static_cast<const c10::complex<double>*>(data));
    default:
      return c10::IValue(t);
  }
}

bool describe(std::string& key, const c10::IValue& v);

// the part of the signature one value contributes (decoded by source.py's _decode); false:
// the value cannot be summarised ('X'), and its formula must see it
bool describe(std::string& key, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      key.push_back('u');
      return true;
    }
    auto* impl = t.unsafeGetTensorImpl();
    if (t.is_nested() || t.layout() != c10::kStrided || impl->has_symbolic_sizes_strides()) {
      key.push_back('X');
      return false;
    }
    if (impl->is_wrapped_number()) {  // a Python number, as a dispatch mode sees it
      c10::IValue number = wrapped_number(t);
      if (!number.isTensor()) return describe(key, number);
    }
    key.push_back('t');
    append(key, static_cast<int8_t>(t.scalar_type()));
    append(key, static_cast<int8_t>(t.device().type()));
    append(key, static_cast<int8_t>(t.requires_grad()));
    auto sizes = t.sizes();
    auto strides = t.strides();  // a stride-0 (broadcast) dimension is read once
    append(key, static_cast<int8_t>(sizes.size()));
    append(key, sizes.data(), sizes.size() * sizeof(int64_t));
    append(key, strides.data(), strides.size() * sizeof(int64_t));
    return true;
  }
  if (v.isNone()) {
    key.push_back('n');
  } else if (v.isSymInt() || v.isSymFloat() || v.isSymBool()) {  // symbolic (tracing): concrete ints only
    auto concrete = v.isSymInt() ? v.toSymInt().maybe_as_int() : c10::nullopt;
    if (!concrete) {
      key.push_back('X');
      return false;
    }
    key.push_back('i');
    append(key, *concrete);
  } else if (v.isInt()) {
    key.push_back('i');
    append(key, v.toInt());
  } else if (v.isDouble()) {
    key.push_back('d');
    append(key, v.toDouble());
  } else if (v.isBool()) {
    key.push_back('b');
    append(key, v.toBool());
  } else if (v.isString()) {
    key.push_back('s');
    key.append(v.toStringRef());
    key.push_back('\0');
  } else if (v.isIntList()) {
    key.push_back('I');
    auto list = v.toIntList();
    append(key, static_cast<int32_t>(list.size()));
    for (int64_t x : list) append(key, x);
  } else if (v.isSymIntList()) {
    auto list = v.toSymIntList();
    key.push_back('I');
    append(key, static_cast<int32_t>(list.size()));
    for (const c10::SymInt& x : list) {
      auto concrete = x.maybe_as_int();
      if (!concrete) {
        key.push_back('X');
        return false;
      }
      append(key, *concrete);
    }
  } else if (v.isDoubleList()) {
    key.push_back('D');
    auto list = v.toDoubleList();
    append(key, static_cast<int32_t>(list.size()));
    for (double x : list) append(key, x);
  } else if (v.isBoolList()) {
    key.push_back('B');
    auto list = v.toBoolList();
    append(key, static_cast<int32_t>(list.size()));
    for (bool x : list) append(key, x);
  } else if (v.isTensorList() || v.isList()) {
    key.push_back('L');
    auto list = v.toListRef();
    append(key, static_cast<int32_t>(list.size()));
    bool ok = true;
    for (const auto& x : list) ok = describe(key, x) && ok;
    return ok;
  } else if (v.isTuple()) {
    key.push_back('T');
    const auto& elements = v.toTupleRef().elements();
    append(key, static_cast<int32_t>(elements.size()));
    bool ok = true;
    for (const auto& x : elements) ok = describe(key, x) && ok;
    return ok;
  } else if (v.isDevice()) {
    key.push_back('v');
    append(key, static_cast<int8_t>(v.toDevice().type()));
  } else if (v.isScalar()) {  // complex
    key.push_back('c');
    auto c = v.toComplexDouble();
    append(key, c.real());
    append(key, c.imag());
  } else if (v.isGenerator()) {  // no formula reads one
    key.push_back('n');
  } else {  // storages, objects: seen by the formula each time
    key.push_back('X');
    return false;
  }
  return true;
}

py::object to_python(const c10::IValue& v);
py::tuple as_tuple(const std::vector<c10::IValue>& values);

// whether the interpreter is finalising (or gone): nothing may call into Python then
bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// hand a claimed op to Python (see the top of this file); an error there is reported as
// unraisable, never thrown into the op
void claim(Frame& frame, const std::vector<c10::IValue>& outputs, int64_t t1) {
  std::vector<c10::IValue> inputs;
  inputs.swap(frame.inputs);
  {
    std::lock_guard<std::mutex> guard(g_lock);
    if (!g_on.load()) return;
    ++g_op_records;
  }
  if (finalizing()) return;  // no Python left to hand it to
  py::gil_scoped_acquire gil;
  if (g_claim == nullptr) return;
  py::object handler = py::reinterpret_borrow<py::object>(g_claim);
  try {
    handler(frame.op, as_tuple(inputs), as_tuple(outputs), frame.t0, t1);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable(handler);
  }
}

// -- tensor parallelism (see the top of this file) ------------------------------------------
PyTypeObject* g_transparent = nullptr;  // DTensor's class (a reference held), or null
std::atomic<bool> g_skip_fake{false};    // ops under a fake tensor mode are not run for real

// a tensor's Python object, or null (torch 2.9's slot checks its interpreter; later ones have one)
template <typename Slot>
auto slot_object(const Slot* slot, int) -> decltype(slot->load_pyobj()) {
  return slot->load_pyobj();
}
template <typename Slot>
PyObject* slot_object(const Slot* slot, long) {
  auto obj = slot->check_pyobj(true);
  return obj ? *obj : nullptr;
}

// whether a tensor is a DTensor (or of a subclass of it): its type read without the GIL, as the
// object lives as long as the tensor and a type's bases do not change
bool is_transparent(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->key_set().has(c10::DispatchKey::Python)) return false;
  PyObject* obj = slot_object(impl->pyobj_slot(), 0);
  for (PyTypeObject* type = obj ? Py_TYPE(obj) : nullptr; type != nullptr; type = type->tp_base) {
    if (type == g_transparent) return true;
  }
  return false;
}

bool on_transparent(c10::ArrayRef<c10::IValue> inputs) {
  for (const auto& v : inputs) {
    if (v.isTensor()) {
      if (v.toTensor().defined() && is_transparent(v.toTensor())) return true;
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (t.defined() && is_transparent(t)) return true;
      }
    }
  }
  return false;
}

bool fake_mode_on() {
  return c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::FAKE).has_value();
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  ThreadState& t = t_state;
  if (t.generation != g_generation.load(std::memory_order_relaxed)) {  // a new session
    t.generation = g_generation.load();
    t.depth = 0;
    t.recorded_depth = 0;
  }
  OwnTime own(t.recorded_depth == 0);  // a part's is in its recorded op's time
  if (t.frames.size() <= t.depth) t.frames.resize(t.depth + 1);
  Frame& frame = t.frames[t.depth++];
  frame.recorded = false;
  frame.claimed = false;
  frame.quiet = false;
  frame.swallowed = false;
  if (t.recorded_depth > 0) {  // a part of a recorded op
    ++t.parts;
    return nullptr;
  }
  if (!g_on.load(std::memory_order_relaxed) ||
      (g_has_claims.load(std::memory_order_relaxed) && c10::ThreadLocalDebugInfo::get(kInsideClaimed))) {
    return nullptr;
  }
  if (g_transparent != nullptr) {  // DTensor is loaded (see the top of this file)
    if (g_skip_fake.load(std::memory_order_relaxed) && fake_mode_on()) {
      frame.swallowed = true;
      ++t.recorded_depth;
      return nullptr;
    }
    if (on_transparent(fn.inputs())) return nullptr;
  }
  frame.fallback = false;
  OpFlags flags = op_of(fn, t);
  int32_t op = flags.id;
  if (op < 0 || !(flags.recorded || flags.fallback)) {
    return nullptr;
  }
  if (flags.recorded) {
    frame.recorded = true;
    ++t.recorded_depth;
  } else {  // recorded at its exit if nothing costed inside it was
    frame.fallback = true;
    frame.costed_before = t.costed_total;
  }
  frame.costed = flags.costed;
  bool stamps = g_stamps.load(std::memory_order_relaxed);
  frame.seq_before = static_cast<int64_t>(at::sequence_number::peek());
  frame.exceptions = std::uncaught_exceptions();
  frame.op = op;
  frame.node_seq = kNoNode;
  frame.accumulated = 0;
  auto node = torch::autograd::get_current_node();
  if (node) {
    uint64_t seq = node->sequence_nr();
    frame.node_seq = static_cast<int64_t>(seq);
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node.get())) {
      frame.accumulated = reinterpret_cast<intptr_t>(acc->variable.unsafeGetTensorImpl());
    }
  }
  frame.key.clear();
  frame.cacheable = true;
  frame.keep = false;
  frame.values_only = false;
  if (!stamps) {
    append(frame.key, op);
    auto inputs = fn.inputs();
    append(frame.key, static_cast<int32_t>(inputs.size()));
    for (const auto& v : inputs) {
      frame.cacheable = describe(frame.key, v) && frame.cacheable;
    }
    frame.claimed = flags.claimed;
    if (frame.claimed) c10::ThreadLocalDebugInfo::_push(kInsideClaimed, std::make_shared<InsideClaimed>());
    frame.keep = flags.keep_values || !frame.cacheable || flags.claimed;
    frame.values_only = flags.keep_values && frame.cacheable && !flags.claimed;
    if (frame.keep) frame.inputs.assign(inputs.begin(), inputs.end());
  }
  // its parts run without RecordFunction (its own end still runs): a unit's, which are counted
  // with it, and those of a recorded op that has many (they are not recorded), when nothing
  // else observes them
  frame.quiet = flags.unit;
  if (frame.recorded && !flags.unit && !frame.claimed) {
    const PerOp& known = per_op(t, op);
    frame.quiet = known.runs >= kQuietAfter && known.parts >= kQuietParts * known.runs && alone();
    frame.parts_before = t.parts;
  }
  if (frame.quiet) {
    frame.rf_was_enabled = at::isRecordFunctionEnabled();
    at::enableRecordFunction(false);
  }
  frame.t0 = now_ns();
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState& t = t_state;
  if (t.depth == 0) return;  // entered before this session began
  Frame& frame = t.frames[--t.depth];
  if (frame.swallowed) {
    frame.swallowed = false;
    --t.recorded_depth;
    return;
  }
  OwnTime own(frame.recorded || t.recorded_depth == 0);  // a part's is in its recorded op's time
  bool claimed = frame.claimed;
  if (claimed) {
    frame.claimed = false;
    try {
      c10::ThreadLocalDebugInfo::_pop(kInsideClaimed);
    } catch (...) {  // the op left another slot on top: nothing to undo that is ours
    }
  }
  bool quiet = frame.quiet;
  if (quiet) {
    frame.quiet = false;
    at::enableRecordFunction(frame.rf_was_enabled);
  }
  if (frame.fallback) {
    frame.fallback = false;
    if (t.costed_total != frame.costed_before) {  // its parts were costed
      frame.inputs.clear();
      return;
    }
  } else if (frame.recorded) {
    --t.recorded_depth;
    frame.recorded = false;
    if (!quiet) {  // its parts were seen: counted for on_enter's choice
      PerOp& known = per_op(t, frame.op);
      known.runs += 1;
      known.parts += t.parts - frame.parts_before;
    }
  } else {
    return;
  }
  int64_t t1 = now_ns();  // (read only for an op recorded: most exits are of ops inside one)
  if (std::uncaught_exceptions() > frame.exceptions) {  // it raised: it did not run (as a
    frame.inputs.clear();                              // dispatch mode, which charges after, sees it)
    return;
  }
  if (frame.costed) ++t.costed_total;
  if (g_stamps.load(std::memory_order_relaxed)) {
    int64_t seq_after = static_cast<int64_t>(at::sequence_number::peek());
    std::lock_guard<std::mutex> guard(g_lock);
    if (!g_on.load(std::memory_order_relaxed)) return;
    g_records.push_back(Record{frame.op, 0, frame.node_seq, frame.seq_before, seq_after, frame.t0, t1, 0});
    ++g_op_records;
    g_pending = static_cast<int64_t>(g_records.size());
    return;
  }
  const auto& outputs = fn.outputs();
  if (claimed) {
    own.add_now();  // the handler is Python's own time
    claim(frame, outputs, t1);
    return;
  }
  bool cacheable = frame.cacheable;
  append(frame.key, static_cast<int32_t>(outputs.size()));
  for (const auto& v : outputs) {
    cacheable = describe(frame.key, v) && cacheable;
  }
  bool keep = frame.keep || !cacheable;
  if (keep && frame.values_only && cacheable) {  // its formula may not need them after all
    std::lock_guard<std::mutex> guard(g_lock);
    if (g_unread.count(frame.key) > 0) {
      keep = frame.keep = false;
      frame.inputs.clear();
    }
  }
  int64_t seq_after = static_cast<int64_t>(at::sequence_number::peek());
  // the operator's last signature on this thread: a repeat needs no lookup
  PerOp* last = cacheable && !keep ? &per_op(t, frame.op) : nullptr;
  std::lock_guard<std::mutex> guard(g_lock);
  if (!g_on.load(std::memory_order_relaxed)) {
    frame.inputs.clear();
    return;
  }
  int32_t sig;
  bool hand_over = false;  // Python sees this op's signature (and values, if kept)
  if (last != nullptr && last->sig >= 0 && last->key == frame.key) {
    sig = last->sig;
  } else if (last != nullptr) {
    auto it = g_sigs.find(frame.key);
    if (it == g_sigs.end()) {
      sig = static_cast<int32_t>(g_sig_keys.size());
      g_sigs.emplace(frame.key, sig);
      g_sig_keys.push_back(frame.key);
      hand_over = true;
    } else {
      sig = it->second;
    }
    last->key = frame.key;
    last->sig = sig;
  } else {  // costed on its own values, every time
    sig = -(++g_next_one_off);
    hand_over = true;
  }
  if (hand_over) {
    Values values{sig, frame.key, frame.keep, keep, {}, {}};
    if (frame.keep) values.inputs = std::move(frame.inputs);
    if (keep) values.outputs.assign(outputs.begin(), outputs.end());
    g_values.push_back(std::move(values));
  }
  frame.inputs.clear();
  g_records.push_back(
      Record{frame.op, sig, frame.node_seq, frame.seq_before, seq_after, frame.t0, t1, frame.accumulated});
  ++g_op_records;
  g_pending = static_cast<int64_t>(g_records.size());
}

// -- memory: what the allocators report ------------------------------------------------------
// c10's allocators (CPU, CUDA's caching allocator, pinned host memory) report each block they
// hand out and take back to the thread-local PROFILER_STATE when its memoryProfilingEnabled()
// holds. A session that tracks memory pushes one of its own there: a ProfilerStateBase whose
// config is Disabled (so torch.profiler's checks see no profiler running) with memory
// profiling on. Each block allocated while recording, and its release, goes into the record
// stream as a kMemory record (sig: the innermost recorded op running on that thread, -1 for
// none; node_seq: the autograd node running; seq_before: the bytes, negative when released;
// t0: on an allocation, 1 when it is one of an op's temporaries (released before the next op
// record, in the same batch), else 0; t1: an AccumulateGrad node's parameter (TensorImpl*,
// else 0); accumulated: the block's address; on a release, seq_after: its allocation's index
// in the same batch, else -1 and t0: the run its allocation went into, see drain_runs), so
// Python replays them in order with the ops and module calls, as the Python path sees tensors.
// Blocks allocated before the session (or while not recording) are not tracked; the release of
// one while recording is recorded with its bytes (seq_after kBefore): the live bytes the
// session began with lose them. The autograd engine carries the state into its threads
// (ThreadLocalState).
constexpr int32_t kMemory = -3;
// a release's seq_after for a block allocated before the session: the allocators that know its
// size (CUDA's caching allocator; c10's CPU allocator only knows blocks made while memory was
// reported) report it, and the live bytes the session started with lose it
constexpr int64_t kBefore = -2;

std::atomic<bool> g_memory{false};
// a block allocated while recording, alive: its bytes, and where its record went (its index in
// g_records, the op records pushed before it, the batch: whether it is one of its op's temporaries)
struct Block {
  int64_t bytes;
  size_t index;
  int64_t ops, batch;
  int64_t run = -1;  // the memory run of drain_runs its allocation went into, once drained
};
int64_t g_next_run = 0;  // under g_lock: drain_runs numbers memory runs per memory session

// the blocks alive by address: open addressing, linear probing (a block comes and goes per op)
class Blocks {
 public:
  Block* find(void* key) {
    if (size_ == 0) return nullptr;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].block;
      if (slots_[i].key == nullptr) return nullptr;
    }
  }
  void put(void* key, const Block& block) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = slot(key);
    while (slots_[i].key != nullptr && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == nullptr) ++size_;
    slots_[i].key = key;
    slots_[i].block = block;
  }
  // ``block``: from find(); the slots after it shift back (no tombstones)
  void erase(Block* block) {
    size_t i = static_cast<size_t>(reinterpret_cast<Slot*>(reinterpret_cast<char*>(block) - offsetof(Slot, block)) -
                                   slots_.data());
    slots_[i].key = nullptr;
    --size_;
    for (size_t j = (i + 1) & mask_; slots_[j].key != nullptr; j = (j + 1) & mask_) {
      size_t home = slot(slots_[j].key);
      if (((j - home) & mask_) >= ((j - i) & mask_)) {  // its home is not between the hole and it
        slots_[i] = slots_[j];
        slots_[j].key = nullptr;
        i = j;
      }
    }
  }
  void clear() {
    slots_.clear();
    size_ = 0;
    mask_ = 0;
  }

 private:
  struct Slot {
    void* key = nullptr;
    Block block{0, 0, 0, 0};
  };
  size_t slot(void* key) const {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(key) * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.resize(std::max<size_t>(1024, 2 * old.size()));
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != nullptr) put(s.key, s.block);
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0, mask_ = 0;
};
Blocks g_blocks;  // under g_lock

// the innermost op recorded (or a fallback) running on this thread, if any
const Frame* innermost_op(const ThreadState& t) {
  for (size_t d = t.depth; d > 0; --d) {
    const Frame& frame = t.frames[d - 1];
    if (frame.recorded || frame.fallback) return &frame;
  }
  return nullptr;
}

struct MemoryState final : torch::profiler::impl::ProfilerStateBase {
  MemoryState()
      : ProfilerStateBase(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled,
                                                                /*report_input_shapes=*/false,
                                                                /*profile_memory=*/true)) {}

  bool memoryProfilingEnabled() const override { return g_memory.load(std::memory_order_relaxed); }

  void reportMemoryUsage(void* ptr, int64_t bytes, size_t, size_t, c10::Device) override {
    if (!g_memory.load(std::memory_order_relaxed) || bytes == 0) return;
    // the op running and its autograd node: the innermost recorded op's, else the thread's
    const ThreadState& t = t_state;
    const Frame* frame = t.generation == g_generation.load(std::memory_order_relaxed) ? innermost_op(t) : nullptr;
    OwnTime own(frame == nullptr);  // inside a recorded op, in its time already
    if (bytes < 0) {
      released(ptr, -bytes);
      return;
    }
    int32_t op = -1;
    int64_t node_seq = kNoNode;
    int64_t variable = 0;  // an AccumulateGrad node's parameter (TensorImpl*): where its blocks belong
    if (frame != nullptr) {
      op = frame->op;
      node_seq = frame->node_seq;
      variable = frame->accumulated;
    } else if (auto node = torch::autograd::get_current_node()) {
      node_seq = static_cast<int64_t>(node->sequence_nr());
      if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node.get())) {
        variable = reinterpret_cast<int64_t>(acc->variable.unsafeGetTensorImpl());
      }
    }
    std::lock_guard<std::mutex> guard(g_lock);
    if (!g_on.load(std::memory_order_relaxed)) return;  // the profiler's own
    g_blocks.put(ptr, Block{bytes, g_records.size(), g_op_records, g_batch});
    g_records.push_back(Record{kMemory, op, node_seq, bytes, 0, 0, variable, reinterpret_cast<intptr_t>(ptr)});
    g_pending = static_cast<int64_t>(g_records.size());
  }

  // a block released (its context does not matter: drain_runs reads only where it was allocated)
  void released(void* ptr, int64_t bytes) {
    std::lock_guard<std::mutex> guard(g_lock);
    Block* block = g_blocks.find(ptr);
    if (block == nullptr) {  // allocated before the session (or not recorded): its bytes, in order
      if (g_on.load(std::memory_order_relaxed)) {
        g_records.push_back(Record{kMemory, -1, kNoNode, -bytes, kBefore, -1, 0, reinterpret_cast<intptr_t>(ptr)});
        g_pending = static_cast<int64_t>(g_records.size());
      }
      return;
    }
    // no op record since it was allocated (an op is recorded when it returns, after what it
    // allocated), in the same batch: it lived inside the op that made it, a temporary
    bool same_batch = block->batch == g_batch && block->index < g_records.size();
    if (same_batch && block->ops == g_op_records) g_records[block->index].t0 = 1;
    g_records.push_back(Record{kMemory, -1, kNoNode, -block->bytes, same_batch ? static_cast<int64_t>(block->index) : -1,
                               same_batch ? 0 : block->run, 0, reinterpret_cast<intptr_t>(ptr)});
    g_blocks.erase(block);
    g_pending = static_cast<int64_t>(g_records.size());
  }

  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }
};

std::shared_ptr<MemoryState> g_memory_state;
int g_log_level = 0;  // c10's log level before the session raised it

// Track memory on this thread (and the autograd threads it starts); false when another
// profiler's state is there (torch.profiler running): that session tracks memory in Python.
bool start_memory() {
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) return false;
  {
    std::lock_guard<std::mutex> guard(g_lock);
    g_blocks.clear();
    g_next_run = 0;
  }
  g_memory_state = std::make_shared<MemoryState>();
  g_own_state.store(g_memory_state.get());
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, g_memory_state);
  // c10's CPU allocator logs a warning for a block released while memory is reported that it
  // saw allocated before: every tensor made before the session, expected here (put back at stop)
  g_log_level = FLAGS_caffe2_log_level;
  FLAGS_caffe2_log_level = std::max(g_log_level, 2);  // errors only
  g_memory.store(true);
  return true;
}

void stop_memory() {
  g_memory.store(false);
  g_own_state.store(nullptr);
  auto state = std::move(g_memory_state);
  if (!state) return;
  FLAGS_caffe2_log_level = g_log_level;
  // ours is taken off when it is the innermost debug info of this thread (it always is, unless
  // the session is stopped on another thread or inside a torch.profiler started after it: then
  // it stays there, reporting nothing, as g_memory is off)
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == state.get()) {
    try {
      c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    } catch (const c10::Error&) {
    }
  }
  std::lock_guard<std::mutex> guard(g_lock);
  g_blocks.clear();
}

// -- module boundaries -------------------------------------------------------------------
// torch's two process-wide module hooks (a forward pre-hook and an always-called forward
// hook), in C++: a call of a module of the profiled model goes into the record stream as an
// enter or exit record (op kEnter or kExit, sig the module's index, node_seq 1 for a forward
// that runs while the backward pass executes a node: a recompute), so Python replays the
// module stack in order with the ops when it charges them, and no Python runs per call.
// The calls Python must see as they happen go to the Python hooks instead: a top-level call
// (a forward begins or ends), and a call while an exception is being handled (the forward
// may have raised). Both sides unwind the stack the same way: to the module's own frame.
//
// Any global module hook sends every module call down torch's slow _call_impl path (about
// 1.4 us a call). So a timing session wraps each hook-free module's forward instead (a
// ForwardWrapper set as the instance attribute ``forward`` for the session: _call_impl keeps
// its fast path and calls it), and gives the modules with hooks of their own module_pre as their
// first pre-hook and module_post_late as their last hook (they take the slow path anyway); Python installs and
// removes both (native/calls.py). A wrapper does what the two hooks do, around the forward,
// for the calls that come through Module.__call__ only (its caller's frame is one of
// _call_impl's: ``callers``), as the hooks see them: a forward called directly is not a call.
constexpr int32_t kEnter = -1, kExit = -2;

struct ModuleHooks {
  bool active = false;
  int64_t generation = 0;  // one per track_modules: the wrappers of an earlier one pass through
  std::unordered_map<PyObject*, int32_t> index;  // module -> its index (Python keeps them alive)
  std::vector<PyObject*> stack;  // the modules entered and not exited, as Python's stack has them
  py::object pre, post;  // the Python hooks, for the calls above
  std::vector<py::object> callers;  // the code objects of the frames Module.__call__ calls forward from
  // the modules whose calls end at a hook of their own, after their own forward hooks
  // (python/calls.py): the global post-hook passes their calls by, module_post_late ends them
  std::unordered_set<PyObject*> late;
};
// used with the GIL held only; never destroyed: its Python objects would be released by the C++
// runtime's exit handlers, after the interpreter has finalised (a fatal error). Python's own
// exit handler (capture/runtime/running.py) stops every session before that; this is the last guard.
ModuleHooks& g_modules = *new ModuleHooks();

bool handling_exception() {
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* value = PyErr_GetHandledException();
  bool handling = value != nullptr && value != Py_None;
  Py_XDECREF(value);
#else
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_GetExcInfo(&type, &value, &traceback);
  bool handling = value != nullptr && value != Py_None;
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
#endif
  return handling;
}

void record_boundary(int32_t kind, int32_t module, int64_t recompute) {
  OwnTime own;
  int64_t t = now_ns();
  int64_t seq = static_cast<int64_t>(at::sequence_number::peek());
  std::lock_guard<std::mutex> guard(g_lock);
  g_records.push_back(Record{kind, module, recompute, seq, seq, t, t, 0});
  g_pending = static_cast<int64_t>(g_records.size());
}

// a call of tracked ``module`` begins: recorded, or heard by the Python pre-hook
// (``to_python()``: calls it, a new reference or nullptr with the error set)
template <typename ToPython>
PyObject* call_begins(PyObject* module, int32_t index, ToPython&& to_python) {
  ModuleHooks& h = g_modules;
  bool top = h.stack.empty();
  h.stack.push_back(module);
  if (top || handling_exception()) return to_python();
  record_boundary(kEnter, index, torch::autograd::get_current_node() ? 1 : 0);
  Py_RETURN_NONE;
}

// a call of tracked ``module`` ends: recorded, or heard by the Python post-hook
template <typename ToPython>
PyObject* call_ends(PyObject* module, int32_t index, ToPython&& to_python) {
  auto& stack = g_modules.stack;
  while (!stack.empty() && stack.back() != module) stack.pop_back();  // abandoned children
  bool found = !stack.empty();
  if (found) stack.pop_back();
  if (!found || stack.empty() || handling_exception()) return to_python();
  record_boundary(kExit, index, 0);
  Py_RETURN_NONE;
}

// the forward pre-hook (global, or a module's own): hook(module, args)
PyObject* module_pre(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ModuleHooks& h = g_modules;
  if (!h.active || nargs < 1) Py_RETURN_NONE;
  auto it = h.index.find(args[0]);
  if (it == h.index.end()) Py_RETURN_NONE;
  return call_begins(args[0], it->second, [&] { return PyObject_Vectorcall(h.pre.ptr(), args, nargs, nullptr); });
}

// the always-called forward hook of a module that ends its calls (its own last one, see
// ModuleHooks::late; a timing session's, see "module boundaries"): hook(module, args, output)
PyObject* module_post_late(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ModuleHooks& h = g_modules;
  if (!h.active || nargs < 1) Py_RETURN_NONE;
  auto it = h.index.find(args[0]);
  if (it == h.index.end()) Py_RETURN_NONE;
  return call_ends(args[0], it->second, [&] { return PyObject_Vectorcall(h.post.ptr(), args, nargs, nullptr); });
}

// the always-called global forward hook: hook(module, args, output); passes the late modules by
PyObject* module_post(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const ModuleHooks& h = g_modules;
  if (nargs >= 1 && !h.late.empty() && h.late.count(args[0]) != 0) Py_RETURN_NONE;
  return module_post_late(self, args, nargs);
}

PyMethodDef g_pre_def = {"module_pre", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(module_pre)),
                         METH_FASTCALL, "The forward pre-hook (see track_modules)."};
PyMethodDef g_post_def = {"module_post", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(module_post)),
                          METH_FASTCALL, "The always-called global forward hook (see track_modules)."};
PyMethodDef g_post_late_def = {"module_post_late",
                               reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(module_post_late)),
                               METH_FASTCALL, "The always-called forward hook a module ends its calls at (see exit_late)."};

// -- a module's forward, wrapped (see "module boundaries")
struct ForwardWrapper {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* module;    // the module (a strong reference)
  PyObject* original;  // what module.forward was: a bound method, or the module's own attribute
  int32_t index;       // the module's index in its session
  int64_t generation;  // its session's
};

bool wrapper_live(const ForwardWrapper* w) {
  const ModuleHooks& h = g_modules;
  return w->generation == h.generation && h.active;
}

// whether the wrapper's caller is Module.__call__ (_call_impl or the closure it calls forward from)
bool called_by_module_call() {
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return false;
  PyCodeObject* code = PyFrame_GetCode(frame);
  bool through = false;
  for (const auto& caller : g_modules.callers) through = through || caller.ptr() == reinterpret_cast<PyObject*>(code);
  Py_DECREF(code);
  return through;
}

PyObject* positional(PyObject* const* args, Py_ssize_t nargs) {
  PyObject* tuple = PyTuple_New(nargs);
  if (tuple == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
  return tuple;
}

// the Python hook ``hook`` called as torch calls it: (module, args[, output])
PyObject* call_hook(PyObject* hook, PyObject* module, PyObject* const* args, Py_ssize_t nargs, PyObject* output) {
  PyObject* tuple = positional(args, nargs);
  if (tuple == nullptr) return nullptr;
  PyObject* result = PyObject_CallFunctionObjArgs(hook, module, tuple, output, nullptr);
  Py_DECREF(tuple);
  return result;
}

#if PY_VERSION_HEX >= 0x030C0000
PyObject* take_raised() { return PyErr_GetRaisedException(); }
void put_back_raised(PyObject* raised) { PyErr_SetRaisedException(raised); }
#else
PyObject* take_raised() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr && value != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return value;
}
void put_back_raised(PyObject* raised) {
  PyErr_Restore(Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(raised))), raised, PyException_GetTraceback(raised));
}
#endif

// ``raised`` as the exception being handled while ``run()`` runs (as in torch's except-block)
template <typename Run>
void while_handling(PyObject* raised, Run&& run) {
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* before = PyErr_GetHandledException();
  PyErr_SetHandledException(raised);
  run();
  PyErr_SetHandledException(before);
  Py_XDECREF(before);
#else
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_GetExcInfo(&type, &value, &traceback);
  PyErr_SetExcInfo(Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(raised))), Py_NewRef(raised),
                   PyException_GetTraceback(raised));
  run();
  PyErr_SetExcInfo(type, value, traceback);
#endif
}

// the forward raised (the error is set): as torch's _call_impl runs an always-called hook for
// an Exception, in its except-block, the call ends while it is handled, output None; a
// BaseException (KeyboardInterrupt) runs no hook: the call is abandoned, as there
void forward_raised(ForwardWrapper* w, PyObject* const* args, Py_ssize_t nargs) {
  if (!wrapper_live(w) || !PyErr_ExceptionMatches(PyExc_Exception)) return;
  PyObject* raised = take_raised();
  if (raised == nullptr) return;
  while_handling(raised, [&] {
    PyObject* out = call_ends(w->module, w->index, [&] {
      return call_hook(g_modules.post.ptr(), w->module, args, nargs, Py_None);
    });
    if (out == nullptr) {
      PyErr_WriteUnraisable(w->module);  // torch warns of a failing always-called hook, and goes on
    } else {
      Py_DECREF(out);
    }
  });
  put_back_raised(raised);
}

PyObject* wrapper_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  if (!wrapper_live(w) || !called_by_module_call()) return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* begun = call_begins(w->module, w->index,
                                [&] { return call_hook(g_modules.pre.ptr(), w->module, args, nargs, nullptr); });
  if (begun == nullptr) {  // the Python pre-hook raised: the call ends as torch ends it then
    forward_raised(w, args, nargs);
    return nullptr;
  }
  Py_DECREF(begun);
  PyObject* output = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
  if (output == nullptr) {
    forward_raised(w, args, nargs);
    return nullptr;
  }
  if (!wrapper_live(w)) return output;
  PyObject* ended = call_ends(w->module, w->index,
                              [&] { return call_hook(g_modules.post.ptr(), w->module, args, nargs, output); });
  if (ended == nullptr) {
    Py_DECREF(output);
    return nullptr;
  }
  Py_DECREF(ended);
  return output;
}

// everything but ``__wrapped__`` is the wrapped callable's (its signature, name, __self__,
// __func__), so the forward looks as it did (generate() reads its signature)
PyObject* wrapper_getattro(PyObject* self, PyObject* name) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  if (PyUnicode_Check(name)) {
    if (PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0) return Py_NewRef(w->original);
    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return PyObject_GenericGetAttr(self, name);
  }
  return PyObject_GetAttr(w->original, name);
}

PyObject* wrapper_repr(PyObject* self) { return PyObject_Repr(reinterpret_cast<ForwardWrapper*>(self)->original); }

int wrapper_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(w->module);
  Py_VISIT(w->original);
  return 0;
}

int wrapper_clear(PyObject* self) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  Py_CLEAR(w->module);
  Py_CLEAR(w->original);
  return 0;
}

void wrapper_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  wrapper_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMemberDef g_wrapper_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, static_cast<Py_ssize_t>(offsetof(ForwardWrapper, vectorcall)), READONLY,
     nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot g_wrapper_slots[] = {
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_getattro, reinterpret_cast<void*>(wrapper_getattro)},
    {Py_tp_repr, reinterpret_cast<void*>(wrapper_repr)},
    {Py_tp_traverse, reinterpret_cast<void*>(wrapper_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(wrapper_clear)},
    {Py_tp_dealloc, reinterpret_cast<void*>(wrapper_dealloc)},
    {Py_tp_members, g_wrapper_members},
    {Py_tp_doc, const_cast<char*>("A module's forward, wrapped by flopsight for a session (see wrap_forward).")},
    {0, nullptr}};

PyType_Spec g_wrapper_spec = {
    "flopsight_native.ForwardWrapper", sizeof(ForwardWrapper), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    g_wrapper_slots};
PyTypeObject* g_wrapper_type = nullptr;

// a wrapper of ``original`` (what module.forward is) for the ``index``-th tracked module of the
// session track_modules began last
py::object wrap_forward(py::object module, int32_t index, py::object original) {
  if (g_wrapper_type == nullptr) {
    g_wrapper_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_wrapper_spec));
    if (g_wrapper_type == nullptr) throw py::error_already_set();
  }
  auto* w = PyObject_GC_New(ForwardWrapper, g_wrapper_type);
  if (w == nullptr) throw py::error_already_set();
  w->vectorcall = wrapper_vectorcall;
  w->module = module.release().ptr();
  w->original = original.release().ptr();
  w->index = index;
  w->generation = g_modules.generation;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(w));
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(w));
}

// callers: the code objects of the frames Module.__call__ calls forward from (for wrappers)
void track_modules(const py::list& modules, py::object pre, py::object post, const py::list& callers) {
  ModuleHooks& h = g_modules;
  h.index.clear();
  h.stack.clear();
  for (size_t i = 0; i < modules.size(); ++i) h.index.emplace(modules[i].ptr(), static_cast<int32_t>(i));
  h.pre = std::move(pre);
  h.post = std::move(post);
  h.callers.clear();
  for (const auto& caller : callers) h.callers.push_back(py::reinterpret_borrow<py::object>(caller));
  h.late.clear();
  ++h.generation;
  h.active = true;
}

// the hooks and wrappers track calls (on) or pass them through (off); returns what it was
bool set_calls_active(bool on) {
  bool was = g_modules.active;
  if (on && g_modules.index.empty()) return was;  // untracked meanwhile (the session stopped): stays off
  g_modules.active = on;
  return was;
}

// (after track_modules) the tracked modules whose calls end at their own module_post_late
void exit_late(const py::list& modules) {
  for (const auto& module : modules) g_modules.late.insert(module.ptr());
}

// the index of the innermost tracked module call running (-1: none), as the module stack is
// once the calls recorded so far are replayed (with the GIL held): what a tensor saved for
// backward belongs to, known without charging the records
int32_t innermost_module() {
  ModuleHooks& h = g_modules;
  if (!h.active || h.stack.empty()) return -1;
  auto it = h.index.find(h.stack.back());
  return it == h.index.end() ? -1 : it->second;
}

void untrack_modules() {
  ModuleHooks& h = g_modules;
  h.active = false;
  ++h.generation;  // the wrappers still referenced (by whoever wrapped them in turn) pass through
  h.index.clear();
  h.stack.clear();
  h.pre = py::object();
  h.post = py::object();
  h.callers.clear();
  h.late.clear();
}

// the module calls begun and not ended (0: none is running)
int64_t open_calls() { return static_cast<int64_t>(g_modules.stack.size()); }

// -- the function mode's __torch_function__ ------------------------------------------------
// A native session's TorchFunctionMode still sees every torch-level call (the backward entry
// points and the units written in Python need it); its __torch_function__ is this C function,
// bound to the mode: (mode, func, types, args[, kwargs]). m_self is (handlers, passthrough):
// a call with no handler runs as it is; one of a unit the recorder counts whole (passthrough)
// on plain tensors too; any other goes to handler(func, args, kwargs).
bool plain_tensors(PyObject* values) {  // a tuple or a dict's values: no tensor subclass among them
  auto plain = [](PyObject* v) { return THPVariable_CheckExact(v) || !THPVariable_Check(v); };
  if (PyTuple_Check(values)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(values); ++i) {
      if (!plain(PyTuple_GET_ITEM(values, i))) return false;
    }
    return true;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(values, &pos, &key, &value)) {
    if (!plain(value)) return false;
  }
  return true;
}

PyObject* intercept(PyObject* self, PyObject* const* a, Py_ssize_t n) {
  if (n < 4 || !PyTuple_Check(a[3])) {
    PyErr_SetString(PyExc_TypeError, "__torch_function__(func, types, args, kwargs=None)");
    return nullptr;
  }
  PyObject* func = a[1];
  PyObject* args = a[3];
  PyObject* kwargs = n > 4 && a[4] != Py_None ? a[4] : nullptr;
  if (kwargs && !PyDict_Check(kwargs)) kwargs = nullptr;
  PyObject* handler = PyDict_GetItemWithError(PyTuple_GET_ITEM(self, 0), func);  // borrowed
  if (handler == nullptr) {
    if (PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
      PyErr_Clear();  // an unhashable callable has no handler
    }
    return PyObject_Call(func, args, kwargs);
  }
  int through = PySet_Contains(PyTuple_GET_ITEM(self, 1), func);
  if (through < 0) return nullptr;
  if (through && plain_tensors(args) && (kwargs == nullptr || plain_tensors(kwargs))) {
    return PyObject_Call(func, args, kwargs);
  }
  py::object keywords = kwargs ? py::reinterpret_borrow<py::object>(kwargs) : py::dict();
  return PyObject_CallFunctionObjArgs(handler, func, args, keywords.ptr(), nullptr);
}

PyMethodDef g_intercept_def = {"__torch_function__",
                               reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(intercept)),
                               METH_FASTCALL, "A function mode's __torch_function__ (see function_mode_hook)."};

// the C function above for one mode's handlers, to be bound to the mode
py::object function_mode_hook(py::dict handlers, py::set passthrough) {
  py::tuple self = py::make_tuple(handlers, passthrough);
  return py::reinterpret_steal<py::object>(PyCFunction_New(&g_intercept_def, self.ptr()));
}

// -- values to Python ------------------------------------------------------------------
py::object to_python(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return py::none();
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      c10::IValue number = wrapped_number(t);
      if (!number.isTensor()) return to_python(number);
    }
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
  }
  if (v.isNone()) return py::none();
  if (v.isInt()) return py::int_(v.toInt());
  if (v.isSymInt()) {
    auto concrete = v.toSymInt().maybe_as_int();
    return concrete ? py::object(py::int_(*concrete)) : py::object(py::none());
  }
  if (v.isSymFloat() || v.isSymBool()) return py::none();
  if (v.isDouble()) return py::float_(v.toDouble());
  if (v.isBool()) return py::bool_(v.toBool());
  if (v.isString()) return py::str(v.toStringRef());
  if (v.isList()) {  // int, float, bool and tensor lists alike, element by element
    py::list out;
    for (const auto& x : v.toListRef()) out.append(to_python(x));
    return std::move(out);
  }
  if (v.isTuple()) {
    py::list out;
    for (const auto& x : v.toTupleRef().elements()) out.append(to_python(x));
    return py::tuple(out);
  }
  if (v.isDevice()) {
    return py::module_::import("torch").attr("device")(v.toDevice().str());
  }
  if (v.isScalar()) {
    auto c = v.toComplexDouble();
    return py::module_::import("builtins").attr("complex")(c.real(), c.imag());
  }
  if (v.isObject()) return torch::jit::toPyObject(v);  // a c10d ProcessGroup or Work (claimed ops)
  return py::none();  // a generator or storage: no formula reads one
}

py::tuple as_tuple(const std::vector<c10::IValue>& values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = to_python(values[i]);
  return out;
}

// the operators whose formulas read values and those with formulas that cost: the op flags
// depend on them, so the operator and signature tables start again
void configure(const std::vector<std::string>& value_ops, const std::vector<std::string>& formula_ops,
               const std::vector<std::string>& unit_ops, const std::vector<std::string>& claimed_ops) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(!g_handle, "flopsight's native recorder is running");
  g_value_ops = std::unordered_set<std::string>(value_ops.begin(), value_ops.end());
  g_formula_ops = std::unordered_set<std::string>(formula_ops.begin(), formula_ops.end());
  g_unit_ops = std::unordered_set<std::string>(unit_ops.begin(), unit_ops.end());
  g_claimed_ops = std::unordered_set<std::string>(claimed_ops.begin(), claimed_ops.end());
  g_has_claims.store(!g_claimed_ops.empty());
  g_ops.clear();
  g_op_of.clear();
  g_sigs.clear();
  g_sig_keys.clear();
  g_unread.clear();
  g_config.fetch_add(1);
}

// signatures (keys) of ops whose formulas read values, found to read none: their ops keep no
// value from now on (a registry's own set, given at each start; one more while running)
void set_unread(const std::vector<py::bytes>& keys) {
  std::lock_guard<std::mutex> guard(g_lock);
  g_unread.clear();
  for (const auto& k : keys) g_unread.insert(std::string(k));
}

void add_unread(py::bytes key) {
  std::lock_guard<std::mutex> guard(g_lock);
  g_unread.insert(std::string(key));
}

// (with the GIL held, the recorder stopped) the class of the tensors whose ops are not recorded,
// their parts are (DTensor), or None; skip_fake: ops under a fake tensor mode are not recorded
void set_transparent(py::object cls, bool skip_fake) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(!g_handle, "flopsight's native recorder is running");
  Py_CLEAR(g_transparent);
  if (!cls.is_none()) {
    TORCH_CHECK(PyType_Check(cls.ptr()), "set_transparent: a class expected");
    g_transparent = reinterpret_cast<PyTypeObject*>(cls.release().ptr());
  }
  g_skip_fake.store(skip_fake);
}

// (with the GIL held) claim: the claimed ops' handler, or None; stamps: record the ops' stamps
// only (see the top of this file)
void start(py::object claim, bool stamps) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(!g_handle, "flopsight's native recorder is already running");
  Py_CLEAR(g_claim);
  if (!claim.is_none()) g_claim = claim.release().ptr();
  g_records.clear();
  g_values.clear();
  g_next_one_off = 0;
  g_own_ns.store(0);
  g_generation.fetch_add(1);
  g_global_callbacks.store(at::hasGlobalCallbacks());
  // thread-local, as a dispatch mode is: the autograd engine carries it into its threads
  // a stamp needs no output; the inputs still tell a composite op's device (op_of_locked)
  g_stamps.store(stamps);
  g_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                                            .needsInputs(true)
                                            .needsOutputs(!stamps)
                                            .scopes({at::RecordScope::FUNCTION}));
  g_on.store(true);
}

void stop() {
  g_on.store(false);
  c10::optional<at::CallbackHandle> handle;
  {
    std::lock_guard<std::mutex> guard(g_lock);
    handle.swap(g_handle);
  }
  if (handle) at::removeCallback(*handle);
  Py_CLEAR(g_claim);  // called with the GIL held
}

// seconds one op's stamps cost it (RecordFunction's own work and the callbacks'), which a timed
// pass's module spans then hold: ``n`` in-place adds to a one-element tensor timed with and
// without the stamps, the least of ``tries`` runs of each (with the GIL held, the recorder idle;
// what it recorded is dropped)
double stamp_cost(int64_t n, int tries) {
  TORCH_CHECK(!g_handle, "flopsight's native recorder is running");
  at::Tensor x = at::zeros({1});
  auto run = [&] {
    int64_t t0 = now_ns();
    for (int64_t i = 0; i < n; ++i) x = x.add(1);
    return now_ns() - t0;
  };
  run();  // the first call of an op looks it up
  int64_t plain = INT64_MAX, stamped = INT64_MAX;
  for (int k = 0; k < tries; ++k) {
    plain = std::min(plain, run());
    start(py::none(), true);
    stamped = std::min(stamped, run());
    stop();
    std::lock_guard<std::mutex> guard(g_lock);
    g_records.clear();
    g_pending = 0;
  }
  return std::max<int64_t>(stamped - plain, 0) * 1e-9 / static_cast<double>(n);
}

// RecordFunction on this thread on or off; returns whether it was on. Off while a call counted
// whole runs: its ops then skip RecordFunction altogether (boxing every op's arguments)
bool set_thread_enabled(bool on) {
  bool was = at::isRecordFunctionEnabled();
  at::enableRecordFunction(on);
  return was;
}

// the number of records not yet drained, as a one-element int64 buffer Python reads without a call
py::memoryview pending_view() {
  return py::memoryview::from_memory(&g_pending, sizeof(g_pending), /*readonly=*/true);
}

// a drain's values as (sig, key, inputs, outputs), inputs and outputs None where not kept
py::list values_list(const std::vector<Values>& values) {
  py::list out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const Values& v = values[i];
    py::object inputs = py::none(), outputs = py::none();
    if (v.has_inputs) inputs = as_tuple(v.inputs);
    if (v.has_outputs) outputs = as_tuple(v.outputs);
    out[i] = py::make_tuple(v.sig, py::bytes(v.key), inputs, outputs);
  }
  return out;
}

// the operators first seen since the last drain as (id, name, overload), ids from ops_known
py::list ops_list(const std::vector<Op>& ops, int32_t ops_known) {
  py::list out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    out[i] = py::make_tuple(static_cast<int32_t>(ops_known + i), ops[i].name, ops[i].overload);
  }
  return out;
}

// (records, values, ops): each record as (op, sig, node sequence nr, sequence nr before and
// after, t0 ns, t1 ns, accumulated TensorImpl address); values as (sig, inputs, outputs); the
// operators first seen since the last drain as (id, name, overload)
py::tuple drain(int32_t ops_known) {
  std::vector<Record> records;
  std::vector<Values> values;
  std::vector<Op> ops;
  {
    std::lock_guard<std::mutex> guard(g_lock);
    records.swap(g_records);
    values.swap(g_values);
    g_pending = 0;
    ++g_batch;
    for (size_t i = static_cast<size_t>(ops_known); i < g_ops.size(); ++i) ops.push_back(g_ops[i]);
  }
  py::list out_records(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    out_records[i] = py::make_tuple(r.op, r.sig, r.node_seq, r.seq_before, r.seq_after, r.t0, r.t1, r.accumulated);
  }
  return py::make_tuple(out_records, values_list(values), ops_list(ops, ops_known));
}

// -- charging in runs ---------------------------------------------------------------------
// What drain_runs hands Python: the records of a batch, with repeats merged, so that Python
// runs once per run instead of once per record. A stretch of records under one context (the
// autograd node running and its parameter, none in a forward) with no module call entered or
// left and no unit among them is charged under one state on the Python side: where its ops
// and blocks go does not change inside it, so the order between its ops and its blocks does
// not matter. Inside such a stretch:
// * op records of one signature become one row with their count and summed time, when Python
//   asks for it (no listener needs each op's interval): outside the nodes, wherever they fall
//   in the stretch (where they go does not change inside it); in a backward node, those in a
//   row with one sequence counter after (an op that made nodes changes where later ones go);
// * the blocks allocated, and those of them released, become one memory run: the figures the
//   memory source needs from them in order (live bytes' change and peak, the largest block,
//   the temporaries' change and peak), as if each were reported in turn. A block released
//   in another run (or batch) is its own row, naming the run it was allocated in: Python
//   ignores it if that run was not the model's (as it ignored the run). It ends the run.
// Each row is 10 int64:
//   op run:      op, sig, node_seq, seq_before, seq_after, t0, t1 (the first op's), accumulated, count, ns summed
//   call:        kEnter or kExit, module, recompute, seq, seq, t, t, 0, 0, 0
//   mark:        kMark, 0, kNoNode, action, 0, t, t, 0, 0, 0
//   memory run:  kMemory, run, node_seq, accumulated, live change, live peak, largest block, its op,
//                temporaries' change, their peak (peaks: kNoPeak when none was allocated)
//   released:    kReleased, run, bytes, temporary, 0...
//   released, allocated before the session: kReleasedBefore, 0, bytes, the block's address, 0...
constexpr int32_t kReleased = -4;
constexpr int32_t kReleasedBefore = -5;
constexpr int32_t kMark = -6;  // an action of Python's, in order with the ops (see mark)
constexpr int64_t kNoPeak = INT64_MIN;

struct Row {
  int64_t v[10];
};

// the rows of a batch of records (g_lock held: operator flags, blocks' runs)
std::vector<Row> runs_of(const std::vector<Record>& records, int64_t batch, bool merge) {
  std::vector<Row> rows;
  rows.reserve(64);
  std::vector<int64_t> run_of(records.size(), -1);  // an allocation's memory run
  std::vector<char> released(records.size(), 0);   // an allocation released in this batch
  bool in_stretch = false;
  int64_t node = 0, accumulated = 0;
  int64_t memory = -1, last_op = -1;  // the open memory run's row, the op row a repeat merges into
  // outside the nodes, the row of each (op, signature) in the stretch: a repeat merges into it
  // wherever it falls (an optimizer's step runs each op once per parameter, in turn)
  std::unordered_map<int64_t, int64_t> row_of;
  auto end_stretch = [&] {
    in_stretch = false;
    memory = last_op = -1;
    if (!row_of.empty()) row_of.clear();
  };
  auto stretch = [&](int64_t n, int64_t a) {  // a record under context (n, a)
    if (!in_stretch || n != node || a != accumulated) {
      end_stretch();
      in_stretch = true;
      node = n;
      accumulated = a;
    }
  };
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    if (r.op == kEnter || r.op == kExit || r.op == kMark) {
      end_stretch();
      rows.push_back(Row{{r.op, r.sig, r.node_seq, r.seq_before, r.seq_after, r.t0, r.t1, 0, 0, 0}});
    } else if (r.op == kMemory && r.seq_before > 0) {  // allocated
      stretch(r.node_seq, r.t1);
      if (memory < 0) {
        memory = static_cast<int64_t>(rows.size());
        rows.push_back(Row{{kMemory, g_next_run++, r.node_seq, r.t1, 0, kNoPeak, 0, -1, 0, kNoPeak}});
      }
      int64_t* m = rows[memory].v;
      run_of[i] = m[1];
      int64_t bytes = r.seq_before;
      if (r.t0 == 1) {  // one of its op's temporaries
        m[8] += bytes;
        m[9] = std::max(m[9], m[8]);
      } else {
        m[4] += bytes;
        m[5] = std::max(m[5], m[4]);
        if (bytes > m[6]) {
          m[6] = bytes;
          m[7] = r.sig;
        }
      }
    } else if (r.op == kMemory && r.seq_after == kBefore) {  // released, allocated before the session
      rows.push_back(Row{{kReleasedBefore, 0, -r.seq_before, r.accumulated, 0, 0, 0, 0, 0, 0}});
      memory = -1;  // in order with the runs around it
    } else if (r.op == kMemory) {  // released
      int64_t bytes = -r.seq_before, run = r.t0;
      bool temporary = false;
      if (r.seq_after >= 0) {  // allocated in this batch
        run = run_of[r.seq_after];
        temporary = records[r.seq_after].t0 == 1;
        released[r.seq_after] = 1;
      }
      if (run < 0) continue;  // drained by drain(): not charged here
      if (memory >= 0 && rows[memory].v[1] == run) {
        rows[memory].v[temporary ? 8 : 4] -= bytes;
      } else {
        rows.push_back(Row{{kReleased, run, bytes, temporary ? 1 : 0, 0, 0, 0, 0, 0, 0}});
        memory = -1;
      }
    } else {  // an op
      stretch(r.node_seq, r.accumulated);
      bool unit = r.op >= 0 && static_cast<size_t>(r.op) < g_ops.size() && g_ops[r.op].unit;
      int64_t key = (static_cast<int64_t>(r.op) << 32) | static_cast<uint32_t>(r.sig);
      bool outside = r.node_seq == kNoNode;
      if (merge && !unit && r.sig >= 0) {
        int64_t into = -1;
        if (outside) {
          auto found = row_of.find(key);
          if (found != row_of.end()) into = found->second;
        } else if (last_op >= 0) {  // in a node: a repeat in a row that made no node in between
          const int64_t* o = rows[last_op].v;
          if (o[0] == r.op && o[1] == r.sig && o[4] == r.seq_after) into = last_op;
        }
        if (into >= 0) {
          int64_t* o = rows[into].v;
          o[8] += 1;
          o[9] += r.t1 - r.t0;
          continue;
        }
      }
      rows.push_back(Row{{r.op, r.sig, r.node_seq, r.seq_before, r.seq_after, r.t0, r.t1, r.accumulated, 1, r.t1 - r.t0}});
      if (unit) {
        end_stretch();  // a unit changes what later nodes are charged to
      } else {
        last_op = static_cast<int64_t>(rows.size()) - 1;
        if (merge && outside && r.sig >= 0) row_of.emplace(key, last_op);
      }
    }
  }
  // the blocks still alive: a release in a later batch names their run
  for (size_t i = 0; i < records.size(); ++i) {
    if (run_of[i] < 0 || released[i]) continue;
    Block* block = g_blocks.find(reinterpret_cast<void*>(records[i].accumulated));
    if (block != nullptr && block->batch == batch && block->index == i) block->run = run_of[i];
  }
  return rows;
}

// drain() in runs (see above): (rows as bytes, values, ops); ``merge``: merge repeated ops
// (with the GIL held) Python's ``action`` (> 0: its number) to do where it falls among the ops
// (place a collective, change the state it charges the ops after by), in the record stream:
// no drain needed
void mark(int64_t action) {
  int64_t t = now_ns();
  std::lock_guard<std::mutex> guard(g_lock);
  if (!g_on.load(std::memory_order_relaxed)) return;
  g_records.push_back(Record{kMark, 0, kNoNode, action, 0, t, t, 0});
  g_pending = static_cast<int64_t>(g_records.size());
}

py::tuple drain_runs(int32_t ops_known, bool merge) {
  std::vector<Row> rows;
  std::vector<Values> values;
  std::vector<Op> ops;
  {
    static std::vector<Record> spare;  // the records' buffer drained last time, kept for its capacity
    std::lock_guard<std::mutex> guard(g_lock);
    std::vector<Record> records;
    records.swap(g_records);
    g_records.swap(spare);
    values.swap(g_values);
    g_pending = 0;
    rows = runs_of(records, g_batch++, merge);
    for (size_t i = static_cast<size_t>(ops_known); i < g_ops.size(); ++i) ops.push_back(g_ops[i]);
    records.clear();
    spare.swap(records);
  }
  py::bytes out_rows(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(Row));
  return py::make_tuple(out_rows, values_list(values), ops_list(ops, ops_known));
}

// (name, overload) of an operator id
py::tuple operator_name(int32_t id) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < g_ops.size(), "no operator ", id);
  return py::make_tuple(g_ops[id].name, g_ops[id].overload);
}

py::bytes signature(int32_t sig) {
  std::lock_guard<std::mutex> guard(g_lock);
  TORCH_CHECK(sig >= 0 && static_cast<size_t>(sig) < g_sig_keys.size(), "no signature ", sig);
  return py::bytes(g_sig_keys[sig]);
}

int64_t clock_ns() { return now_ns(); }

int64_t take_own_ns() { return g_own_ns.exchange(0); }

// torch.dtype of each ScalarType index (None where there is none): signatures name dtypes by index
py::list dtypes() {
  py::list out;
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    try {
      out.append(py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(i)))));
    } catch (...) {
      out.append(py::none());
    }
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flopsight's native op recorder (see recorder.cpp)";
  m.def("configure", &configure, py::arg("value_ops"), py::arg("formula_ops"), py::arg("unit_ops"),
        py::arg("claimed_ops"),
        "Name the operators ('ns::name.overload') whose formulas read values (their ops keep them), "
        "those with formulas that cost (a composite one is recorded whole if none of its parts "
        "is), those counted whole (units) and those handed to Python as they return; forgets the operators and signatures learnt so far.");
  m.def("start", &start, py::arg("claim") = py::none(), py::arg("stamps") = false,
        "Install the recorder on this thread (and the autograd threads it starts); claim(op, inputs, outputs, "
        "t0, t1) gets each claimed op as it returns; stamps: record each op's stamps only (sig 0).");
  m.def("set_transparent", &set_transparent, py::arg("cls"), py::arg("skip_fake"),
        "Ops on tensors of class cls (DTensor; None: none) are not recorded, their parts are; skip_fake: ops "
        "under a fake tensor mode are not recorded, nor their parts (see recorder.cpp).");
  m.def("mark", &mark, py::arg("action"), "An action of Python's, numbered, in the record stream.");
  m.def("set_unread", &set_unread, py::arg("keys"), "The signatures whose ops keep no values (all of them).");
  m.def("add_unread", &add_unread, py::arg("key"), "One more signature whose ops keep no values.");
  m.def("signature", &signature, py::arg("sig"), "A signature's key.");
  m.def("operator", &operator_name, py::arg("id"), "(name, overload) of an operator id.");
  m.def("stop", &stop, "Remove the recorder.");
  m.def("stamp_cost", &stamp_cost, py::arg("n"), py::arg("tries"),
        "Seconds a stamped op costs beyond its run (n one-element adds, the least of tries runs).");
  m.def("set_thread_enabled", &set_thread_enabled, py::arg("on"),
        "RecordFunction on this thread on or off (returns whether it was on).");
  m.def("start_memory", &start_memory,
        "Track the blocks the allocators report, into the record stream (false: torch.profiler's state is "
        "on this thread, memory is not tracked here).");
  m.def("stop_memory", &stop_memory, "Stop tracking memory.");
  m.def("profiler_state", []() { return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr; },
        "Whether a profiler's state (torch.profiler's) is on this thread.");
  m.def("pending_view", &pending_view, "The number of records not yet drained, as an int64 buffer.");
  m.def("drain", &drain, py::arg("ops_known"), "Hand over and forget what was recorded so far.");
  m.def("drain_runs", &drain_runs, py::arg("ops_known"), py::arg("merge"),
        "drain() in runs: rows of 10 int64 (see recorder.cpp), values, ops; merge: merge repeated ops.");
  m.def("clock_ns", &clock_ns, "The recorder's clock (steady_clock) in nanoseconds.");
  m.def("take_own_ns", &take_own_ns, "The recorder's own time in its callbacks since the last take (or start), ns.");
  m.def("dtypes", &dtypes, "torch.dtype per ScalarType index.");
  m.def("track_modules", &track_modules, py::arg("modules"), py::arg("pre"), py::arg("post"),
        py::arg("callers") = py::list(),
        "Record the calls of these modules (index = position) through module_pre and module_post, or their "
        "wrapped forwards (wrap_forward), those a frame of callers (code objects) calls; the calls Python must "
        "see at once go to the Python hooks pre and post.");
  m.def("wrap_forward", &wrap_forward, py::arg("module"), py::arg("index"), py::arg("original"),
        "A callable to set as the index-th tracked module's forward for the session: it calls original "
        "(what module.forward was) as module_pre and module_post would see the call.");
  m.def("set_calls_active", &set_calls_active, py::arg("on"),
        "The module hooks and wrappers track calls (on) or pass them through; returns what it was.");
  m.def("exit_late", &exit_late, py::arg("modules"),
        "The tracked modules whose calls end at their own module_post_late hook (the global module_post "
        "passes them by).");
  m.def("open_calls", &open_calls, "The tracked module calls begun and not ended.");
  m.def("innermost_module", &innermost_module,
        "The index of the innermost tracked module call running (-1: none).");
  m.def("untrack_modules", &untrack_modules, "Stop recording module calls and forget the modules.");
  m.def("function_mode_hook", &function_mode_hook, py::arg("handlers"), py::arg("passthrough"),
        "A __torch_function__ in C for a function mode (bind it to the mode): calls with no handler "
        "run as they are, as do calls of the passthrough functions on plain tensors; the others go to "
        "handler(func, args, kwargs).");
  m.add_object("module_pre", py::reinterpret_steal<py::object>(PyCFunction_New(&g_pre_def, nullptr)));
  m.add_object("module_post", py::reinterpret_steal<py::object>(PyCFunction_New(&g_post_def, nullptr)));
  m.add_object("module_post_late", py::reinterpret_steal<py::object>(PyCFunction_New(&g_post_late_def, nullptr)));
}
