# %% [markdown]
# # Lesson 07: Interview drill
#
# The questions interviewers ask about ZeRO and DeepSpeed, each checked automatically and then explained. Several
# popular answers are wrong; the explanations say which and
# why, with the correct figure computed by zerolab.

# %% [markdown] lang="zh" en="095a52548e8b"
# # 第 07 课：面试演练
#
# 面试官常问的 ZeRO 与 DeepSpeed 问题，每题自动判分，随后给出解析。网上流传的不少“标准答案”其实是错的；
# 解析会指出错在哪里、为什么错，并给出用 zerolab 算出的正确数字。

# %% [markdown]
# ## How the drill works
#
# - Each question names a variable (`Q01`, `Q02`, ...). Replace the stub in its answer cell with one line such as
#   `Q01 = 16`. Numbers are plain `int` or `float` in the unit the question asks for; multiple-choice answers are a
#   letter such as `"B"`; some answers are a small dict.
# - Run the test cell below your answer: it tells you whether you are right and, if not, what to reconsider.
#   **Hidden tests** run when the notebook is graded; they check the same answer again as plain data (a JSON round
#   trip), so an object that only pretends to be equal earns nothing.
# - The explanation follows each test, folded: open it once your test cell says "Right."; the figures below it
#   appear when you run that cell after your test has passed.
# - *Accepted:* numbers as `int` or `float`, within 1 % of the reference (2 % where a question says so; Q01 and Q07
#   exact). Where a question asks for an `int` (a count: Q08, Q09, Q15, Q16), a float such as `16.0` is a wrong type.
#   Letters and `"fp16"`/`"bf16"` in any case, with or without spaces; dict keys exactly as the question writes them.
# - Numbers are "GB" = 10^9 bytes unless a question says GiB (2^30 bytes), and count model states only
#   (parameters, gradients, optimizer states), as in the ZeRO paper. Ψ (Psi) is the number of parameters and Nd the
#   number of data-parallel GPUs.
#
# Work it out on paper; you may also use `zerolab` (lessons 01 to 03), as in an interview you would use a whiteboard.

# %% [markdown] lang="zh" en="5e5ab29395ab"
# ## 演练怎么做
#
# - 每道题对应一个变量（`Q01`、`Q02`……）。把答案单元格里的占位代码换成一行答案，例如 `Q01 = 16`。
#   数值题填普通的 `int` 或 `float`，单位按题目要求；选择题填一个字母，例如 `"B"`；有几道题的答案是一个小字典。
# - 运行答案下面的测试单元格：它会告诉你答对了没有；没答对时，会提示你该重新想哪一点。**隐藏测试**在评分时运行：
#   它们把你的答案当作纯数据（经过一次 JSON 往返）再检查一遍，所以一个只是“假装相等”的对象拿不到分。
# - 每道题的测试后面是折叠起来的解析：等测试单元格输出“正确。”之后再展开；解析下面的数字，
#   要在你的测试通过之后再运行那个单元格才会显示。
# - *判分规则：* 数值可以是 `int` 或 `float`，与参考答案相差 1 % 以内即可（题目注明 2 % 的按 2 %；
#   Q01 和 Q07 要求精确）。题目要求 `int` 的（计数题：Q08、Q09、Q15、Q16），写成 `16.0` 这样的浮点数算类型错误。
#   字母以及 `"fp16"`/`"bf16"` 不区分大小写，有无空格均可；字典的键必须与题目中写的完全一致。
# - 除非题目注明是 GiB（2^30 字节），“GB” 一律指 10^9 字节；并且只统计模型状态（参数、梯度、优化器状态），
#   与 ZeRO 论文一致。Ψ（Psi）表示参数量，Nd 表示数据并行的 GPU 数。
#
# 先在纸上推一推；也可以用 `zerolab`（第 01 到 03 课），就像面试时可以在白板上演算一样。

# %% nbgrader={"grade": false, "grade_id": "drill_setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from zerolab.engine import comm, memory, units
from zerolab.lesson import drill
from zerolab.lesson.checks import plain
from zerolab.base.i18n import tr
from zerolab.lesson.reveal import passed, revealed


PSI = units.parse_count("1B")
P13 = units.parse_count("13B")
P75 = units.parse_count("7.5B")


# %% [markdown]
# ## Q01: bytes per parameter (1 point)
#
# Training with mixed-precision Adam (fp16 parameters and gradients, the ZeRO paper's setting) and plain data
# parallelism: how many bytes of model state does each parameter cost on every GPU? Set `Q01` to an int.

# %% [markdown] lang="zh" en="fdbbd90c9bf1"
# ## Q01：每个参数占多少字节（1 分）
#
# 用混合精度 Adam 训练（fp16 参数和梯度，即 ZeRO 论文的设定），采用普通数据并行：
# 每个参数在每张 GPU 上要占多少字节的模型状态？把 `Q01` 设为一个 int。

# %% nbgrader={"grade": false, "grade_id": "ex1_bytes_per_param", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q01 = 16
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex1_bytes_per_param", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

close_to(Q01, memory.estimate(PSI, 0).gpu_bytes / PSI, "Q01", 1e-9, "bytes",
         hint="add up fp16 parameters, fp16 gradients and everything Adam keeps in fp32",
         slips={0.75: "that leaves out the fp32 master weights: Adam's moments are only part of K",
                0.125: "that is only the fp16 weights; training keeps gradients and optimizer states too"})
### BEGIN HIDDEN TESTS
from zerolab.engine import memory
from zerolab.lesson.checks import close_to, plain

close_to(plain(Q01, "Q01"), memory.estimate(3 * 10**9, 0, gpus_per_node=4).gpu_bytes / (3 * 10**9), "Q01", 1e-9, "bytes")
### END HIDDEN TESTS
passed("Q01")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** 2 bytes of fp16 parameters, 2 of fp16 gradients, and K = 12 bytes of optimizer state: the paper's
# "2Ψ + 2Ψ + KΨ = 16Ψ" (section 3.1). zerolab's breakdown per parameter:
#
# </details>

# %% [markdown] lang="zh" en="4450832055fb"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** fp16 参数 2 字节，fp16 梯度 2 字节，再加 K = 12 字节的优化器状态：
# 也就是论文里的 “2Ψ + 2Ψ + KΨ = 16Ψ”（第 3.1 节）。zerolab 给出的每参数明细：
#
# </details>

# %%
if revealed("Q01"):
    e = memory.estimate(PSI, 0)
    print({part: nbytes / PSI for part, nbytes in e.breakdown["gpu"].items()}, tr("total"), e.gpu_bytes / PSI)

# %% [markdown]
# ## Q02: where K = 12 comes from (1 point)
#
# The paper's optimizer-state multiplier K is 12 bytes per parameter for mixed-precision Adam. What are they?
#
# - A: fp16 parameters + fp16 gradients + fp32 momentum
# - B: fp32 gradients + fp32 momentum + fp32 variance
# - C: fp32 momentum + fp32 variance, 6 bytes each
# - D: fp32 master weights + fp32 momentum + fp32 variance
#
# Set `Q02` to a letter.

# %% [markdown] lang="zh" en="1e536af723a8"
# ## Q02：K = 12 是怎么来的（1 分）
#
# 对混合精度 Adam，论文中的优化器状态系数 K 是每个参数 12 字节。这 12 字节都是什么？
#
# - A：fp16 参数 + fp16 梯度 + fp32 动量
# - B：fp32 梯度 + fp32 动量 + fp32 方差
# - C：fp32 动量 + fp32 方差，各 6 字节
# - D：fp32 主权重 + fp32 动量 + fp32 方差
#
# 把 `Q02` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex2_k12", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q02 = "D"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex2_k12", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q02, "ABCD", "Q02")
assert drill.is_right("Q02", _letter), \
    "Q02 is not right: Adam's two moments are only 8 of the 12 bytes; what else does mixed precision keep in fp32?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q02", ["zerolab.lesson.drill"], exercise="Q02",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q02, "Q02"), "ABCD", "Q02") == drill.key("Q02"), "Q02 is not right"
### END HIDDEN TESTS
passed("Q02")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** K counts the fp32 **master weights** (4 bytes) as well as Adam's momentum and variance (4 + 4). The
# fp32 copy is needed because fp16 cannot represent small updates to a weight. A frequent mistake is to count only
# the two moments; then the total is not 16 bytes. (DeepSpeed's estimator counts 4 more: the partitioned fp32
# gradients; see Q05.)
#
# </details> <!-- claim: fp16-cannot-hold-small-updates --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes -->

# %% [markdown] lang="zh" en="84645af5daaa"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** K 除了 Adam 的动量（momentum）和方差（variance）各 4 字节，还包括 4 字节的 fp32 **主权重**。
# 之所以要保留这份 fp32 副本，是因为 fp16 表示不了对权重的微小更新。常见的错误是只算两个动量，
# 那样总数就凑不出 16 字节。（DeepSpeed 的估算函数还会再多算 4 字节：切分后的 fp32 梯度；见 Q05。）
#
# </details> <!-- claim: fp16-cannot-hold-small-updates --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes -->

# %%
if revealed("Q02"):
    parts = memory.estimate(PSI, 0).breakdown["gpu"]
    print("K =", (parts["master_weights"] + parts["optimizer_states"]) / PSI, tr("bytes per parameter:"),
          {name: parts[name] / PSI for name in ("master_weights", "optimizer_states")})

# %% [markdown]
# ## Q03: Adam's states for a 13B model (2 points)
#
# How many GB do Adam's momentum and variance (both fp32) take for a 13B-parameter model? Set `Q03` to a number of GB
# (10^9 bytes).

# %% [markdown] lang="zh" en="11d16bf8d8e2"
# ## Q03：13B 模型的 Adam 状态（2 分）
#
# 一个 13B 参数的模型，Adam 的动量和方差（都是 fp32）一共占多少 GB？把 `Q03` 设为 GB 数（10^9 字节）。

# %% nbgrader={"grade": false, "grade_id": "ex3_adam_13b", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q03 = memory.estimate(P13, 0).breakdown["gpu"]["optimizer_states"] / units.GB
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex3_adam_13b", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

close_to(Q03, memory.estimate(P13, 0).breakdown["gpu"]["optimizer_states"] / units.GB, "Q03", 0.01, "GB",
         hint="how many fp32 tensors of 13B values does Adam keep, at how many bytes each?",
         slips={0.5: "that is one fp32 tensor of 13B values; Adam keeps two",
                1.5: "that adds the fp32 master weights; the question asks for momentum and variance only"})
### BEGIN HIDDEN TESTS
from zerolab.engine import memory, units
from zerolab.lesson.checks import close_to, plain

reference = memory.estimate(units.parse_count("13B"), 0).breakdown["gpu"]["optimizer_states"] / units.GB
close_to(plain(Q03, "Q03"), reference, "Q03", 0.01, "GB")
### END HIDDEN TESTS
passed("Q03")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** Two fp32 tensors of Ψ values: 8 bytes per parameter. **A common claim** says "Adam's states for 13B take
# 52 GB": that is 4 bytes per parameter, a single fp32 tensor. Add the fp32 master weights (the paper's K = 12) and the
# whole optimizer state is larger still; add fp16 parameters and gradients and you reach the full 16Ψ:
#
# </details>

# %% [markdown] lang="zh" en="ec78d601e1b8"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 两个各含 Ψ 个值的 fp32 张量：每个参数 8 字节。**常见说法**是“13B 模型的 Adam 状态占 52 GB”：
# 那是每个参数 4 字节，只算了一个 fp32 张量。再加上 fp32 主权重（论文的 K = 12），整个优化器状态还要更大；
# 再加上 fp16 参数和梯度，就是完整的 16Ψ：
#
# </details>

# %%
if revealed("Q03"):
    parts = memory.estimate(P13, 0).breakdown["gpu"]
    print(tr("Adam momentum + variance:"), units.format_bytes(parts["optimizer_states"], "GB"))
    print(tr("plus fp32 master weights:"), units.format_bytes(parts["optimizer_states"] + parts["master_weights"], "GB"))
    print(tr("all model states (16 bytes per parameter):"), units.format_bytes(sum(parts.values()), "GB"))

# %% [markdown]
# ## Q04: the paper's example, per GPU (2 points)
#
# The ZeRO paper's running example: Ψ = 7.5B parameters on Nd = 64 GPUs, mixed-precision Adam. How many GB of model
# state does each GPU hold with ZeRO-1 (P_os), ZeRO-2 (P_os+g) and ZeRO-3 (P_os+g+p)? Set `Q04` to a dict
# `{"zero1": ..., "zero2": ..., "zero3": ...}` of GB (answers within 2 % count).

# %% [markdown] lang="zh" en="bbfa78d19b59"
# ## Q04：论文里的例子，每张 GPU（2 分）
#
# ZeRO 论文贯穿全文的例子：Ψ = 7.5B 参数，Nd = 64 张 GPU，混合精度 Adam。在 ZeRO-1（P_os）、
# ZeRO-2（P_os+g）和 ZeRO-3（P_os+g+p）下，
# 每张 GPU 各持有多少 GB 的模型状态？把 `Q04` 设为以 GB 为单位的字典 `{"zero1": ..., "zero2": ..., "zero3": ...}`（误差在 2 % 以内算对）。

# %% nbgrader={"grade": false, "grade_id": "ex4_paper_example", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q04 = {f"zero{stage}": memory.estimate(P75, stage, gpus_per_node=64).gpu_bytes / units.GB
       for stage in (1, 2, 3)}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex4_paper_example", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to, dict_keys

dict_keys(Q04, ["zero1", "zero2", "zero3"], "Q04")
for stage in (1, 2, 3):
    close_to(Q04[f"zero{stage}"], memory.estimate(P75, stage, gpus_per_node=64).gpu_bytes / units.GB, f"Q04['zero{stage}']",
             0.02, "GB", hint=f"which of the 2 + 2 + 12 bytes does ZeRO-{stage} divide by Nd?")
### BEGIN HIDDEN TESTS
from zerolab.engine import memory, units
from zerolab.lesson.checks import close_to, dict_keys, plain

answer = dict_keys(plain(Q04, "Q04"), ["zero1", "zero2", "zero3"], "Q04")
for stage in (1, 2, 3):
    reference = memory.estimate(units.parse_count("7.5B"), stage, gpus_per_node=64).gpu_bytes / units.GB
    close_to(answer[f"zero{stage}"], reference, f"Q04['zero{stage}']", 0.02, "GB")
### END HIDDEN TESTS
passed("Q04")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** ZeRO-1 divides the K = 12 bytes of optimizer state by Nd, ZeRO-2 also the 2 bytes of gradients, ZeRO-3
# also the 2 bytes of parameters. The paper prints these figures in section 5 and Figure 1 (with ZeRO-3 rounded to
# 1.9 GB); zerolab reproduces them:
#
# </details>

# %% [markdown] lang="zh" en="a6c31b4c7ade"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** ZeRO-1 把 K = 12 字节的优化器状态除以 Nd，ZeRO-2 再把 2 字节的梯度也除以 Nd，
# ZeRO-3 再把 2 字节的参数也除以 Nd。论文在第 5 节和图 1 中给出了这些数字（ZeRO-3 四舍五入为 1.9 GB）；
# zerolab 复现如下：
#
# </details>

# %%
if revealed("Q04"):
    for stage in (0, 1, 2, 3):
        print(tr(f"ZeRO-{stage} on 64 GPUs:"), units.format_bytes(memory.estimate(P75, stage, gpus_per_node=64).gpu_bytes, "GB"))

# %% [markdown]
# ## Q05: ZeRO-2 for 13B on 8 GPUs (2 points)
#
# A 13B model, ZeRO-2, 8 GPUs, mixed-precision Adam, no offload. Per-GPU model states in GB by the paper's accounting?
# Set `Q05` to a number.

# %% [markdown] lang="zh" en="1a1cb8765dec"
# ## Q05：13B 模型在 8 卡上跑 ZeRO-2（2 分）
#
# 13B 模型，ZeRO-2，8 张 GPU，混合精度 Adam，不卸载（offload）。按论文的口径，
# 每张 GPU 上的模型状态是多少 GB？把 `Q05` 设为一个数。

# %% nbgrader={"grade": false, "grade_id": "ex5_zero2_13b", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q05 = memory.estimate(P13, 2, gpus_per_node=8).gpu_bytes / units.GB
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex5_zero2_13b", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

expected = memory.estimate(P13, 2, gpus_per_node=8).gpu_bytes / units.GB
deepspeed_figure = memory.estimate(P13, 2, gpus_per_node=8, accounting="deepspeed").gpu_bytes / units.GB
close_to(Q05, expected, "Q05", 0.01, "GB", hint="2 bytes stay whole on every GPU, the other 14 are divided by 8",
         slips={36 / expected: "36 GB is the popular wrong answer: it counts 6 bytes of partitioned state per parameter",
                deepspeed_figure / expected: "that is DeepSpeed's estimator (18 partitioned bytes); the question asks "
                                             "for the paper's accounting"})
### BEGIN HIDDEN TESTS
from zerolab.engine import memory, units
from zerolab.lesson.checks import close_to, plain

reference = memory.estimate(units.parse_count("13B"), 2, gpus_per_node=8).gpu_bytes / units.GB
close_to(plain(Q05, "Q05"), reference, "Q05", 0.01, "GB")
### END HIDDEN TESTS
passed("Q05")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** The paper's P_os+g: 2Ψ of fp16 parameters on every GPU plus (2 + K)Ψ / Nd. **A common claim** is "26 GB + 78 GB / 8 ≈ 36 GB": its 78 GB of partitioned state is far fewer bytes
# per parameter than the paper partitions (printed below), so it matches no accounting. DeepSpeed's own estimator says more than the paper, because it also counts 4 bytes per
# parameter of partitioned fp32 gradients, and it prints GiB under the label "GB":
#
# </details> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: deepspeed-estimators-print-gib-as-gb -->

# %% [markdown] lang="zh" en="ca85e9c7d000"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 论文的 P_os+g：每张 GPU 上都有 2Ψ 的 fp16 参数，再加 (2 + K)Ψ / Nd。
# **常见说法**是 “26 GB + 78 GB / 8 ≈ 36 GB”：其中 78 GB 的切分状态折合到每个参数，
# 远少于论文切分的字节数（见下面的输出），所以它对不上任何一种口径。DeepSpeed 自己的估算函数给出的数比论文大，
# 因为它还算上了每个参数 4 字节的切分 fp32 梯度，而且它打印的是 GiB，标签却写着 “GB”：
#
# </details> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: deepspeed-estimators-print-gib-as-gb -->

# %%
if revealed("Q05"):
    ddp_parts = memory.estimate(P13, 0).breakdown["gpu"]
    print(tr("partitioned bytes per parameter: claim"), 78 * units.GB / P13,
          tr(" paper"), sum(n for part, n in ddp_parts.items() if part != "params") / P13)
    for accounting in ("paper", "deepspeed"):
        e = memory.estimate(P13, 2, gpus_per_node=8, accounting=accounting)
        print(f"{accounting:9}: {units.format_bytes(e.gpu_bytes, 'GB')} = {units.format_bytes(e.gpu_bytes, 'GiB')}")

# %% [markdown]
# ## Q06: what ZeRO-1 keeps (1 point)
#
# With Nd = 8, what fraction of plain data parallelism's per-GPU model-state memory does ZeRO-1 keep? Set `Q06` to a
# number between 0 and 1.

# %% [markdown] lang="zh" en="d2fbeae5e0b4"
# ## Q06：ZeRO-1 剩下多少（1 分）
#
# Nd = 8 时，ZeRO-1 每张 GPU 的模型状态显存是普通数据并行的几分之几？把 `Q06` 设为 0 到 1 之间的数。

# %% nbgrader={"grade": false, "grade_id": "ex6_zero1_fraction", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q06 = memory.estimate(P13, 1, gpus_per_node=8).gpu_bytes / memory.estimate(P13, 0, gpus_per_node=8).gpu_bytes
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex6_zero1_fraction", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

expected = memory.estimate(PSI, 1, gpus_per_node=8).gpu_bytes / memory.estimate(PSI, 0, gpus_per_node=8).gpu_bytes
close_to(Q06, expected, "Q06", 0.01, hint="keep 2 + 2 bytes whole and divide the 12 by Nd, then compare with 16",
         slips={100: "wrong unit: that is a percentage; give a fraction between 0 and 1",
                0.75 / expected: "75 % is the popular wrong figure; what does ZeRO-1 partition, and what stays whole?",
                (1 - expected) / expected: "that is the fraction saved, not the fraction kept"})
### BEGIN HIDDEN TESTS
from zerolab.engine import memory
from zerolab.lesson.checks import close_to, plain

reference = memory.estimate(10**9, 1, gpus_per_node=8).gpu_bytes / memory.estimate(10**9, 0, gpus_per_node=8).gpu_bytes
close_to(plain(Q06, "Q06"), reference, "Q06", 0.01)
### END HIDDEN TESTS
passed("Q06")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** (4 + 12/8) / 16. **A common claim** puts ZeRO-1, -2, -3 at "75 %, 40 %, 15 % of the memory"; 75 % is
# ZeRO-1's *saving* as Nd grows, not what it keeps, and all such fractions depend on Nd:
#
# </details>

# %% [markdown] lang="zh" en="491407d01b4b"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** (4 + 12/8) / 16。**常见说法**称 ZeRO-1、-2、-3 分别“占 75 %、40 %、15 % 的显存”；
# 可 75 % 是 Nd 很大时 ZeRO-1 *省下* 的比例，不是它剩下的比例，而且这类比例都取决于 Nd：
#
# </details>

# %%
if revealed("Q06"):
    for nd in (8, 64, 1024):
        ddp = memory.estimate(PSI, 0, gpus_per_node=nd).gpu_bytes
        print(f"Nd={nd:5}: " + "  ".join(tr(f"ZeRO-{s} keeps {memory.estimate(PSI, s, gpus_per_node=nd).gpu_bytes / ddp:.1%}")
                                          for s in (1, 2, 3)))

# %% [markdown]
# ## Q07: communication volume (2 points)
#
# Per training step (no gradient accumulation), how much data does each GPU move, as a multiple of Ψ, in the paper's
# accounting? Set `Q07` to `{"ddp": ..., "zero1": ..., "zero2": ..., "zero3": ...}`.

# %% [markdown] lang="zh" en="a7c7f0481107"
# ## Q07：通信量（2 分）
#
# 每个训练步（不做梯度累积），按论文的口径，
# 每张 GPU 传输的数据量是 Ψ 的几倍？把 `Q07` 设为 `{"ddp": ..., "zero1": ..., "zero2": ..., "zero3": ...}`。

# %% nbgrader={"grade": false, "grade_id": "ex7_comm_volume", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q07 = {name: comm.traffic(P13, stage, 8).volume_in_params
       for name, stage in (("ddp", 0), ("zero1", 1), ("zero2", 2), ("zero3", 3))}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex7_comm_volume", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to, dict_keys

dict_keys(Q07, ["ddp", "zero1", "zero2", "zero3"], "Q07")
for name, stage in (("ddp", 0), ("zero1", 1), ("zero2", 2), ("zero3", 3)):
    close_to(Q07[name], comm.traffic(PSI, stage, 8).volume_in_params, f"Q07['{name}']", 1e-6, "multiples of Ψ",
             hint="count each all-reduce as a reduce-scatter plus an all-gather, each Ψ")
### BEGIN HIDDEN TESTS
from zerolab.engine import comm
from zerolab.lesson.checks import close_to, dict_keys, plain

answer = dict_keys(plain(Q07, "Q07"), ["ddp", "zero1", "zero2", "zero3"], "Q07")
for name, stage in (("ddp", 0), ("zero1", 1), ("zero2", 2), ("zero3", 3)):
    close_to(answer[name], comm.traffic(3 * 10**9, stage, 64).volume_in_params, f"Q07['{name}']", 1e-6)
### END HIDDEN TESTS
passed("Q07")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** In the paper's accounting, which the question asks for: DDP's all-reduce is a reduce-scatter (Ψ) plus
# an all-gather (Ψ), and ZeRO-1 and ZeRO-2 do exactly these two with a different purpose: reduce-scatter the gradients
# to their owners, all-gather the updated parameters. That equality needs a reduce-scatter. DeepSpeed 0.19.8's default
# ZeRO-1/2 (`use_multi_rank_bucket_allreduce: true`) all-reduces each gradient bucket and then all-gathers the
# parameters: 3Ψ, 1.5x DDP (lesson 03; both accountings are printed below). ZeRO-3
# must gather the parameters for the forward pass and **again** for the backward pass, plus the gradient
# reduce-scatter: 1.5x DDP (paper section 7). **A common claim**, "ZeRO-3 needs 80 communications per step for a
# 40-layer model", counts calls, not volume, forgets the reduce-scatters, and ignores that DeepSpeed gathers per
# submodule, coalesces prefetches into buckets and keeps small parameters resident. The call count depends on the
# implementation, and below the paper's 3Ψ so does the volume: once its first step has recorded the order of the
# submodules, DeepSpeed keeps gathered from forward into backward the parameters it will use again soon
# (`stage3_max_reuse_distance`, `stage3_max_live_parameters`), and gathers again only those beyond that distance.
#
# </details> <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero3-module-hooks-fetch-and-release --> <!-- claim: zero3-prefetches-along-the-recorded-trace --> <!-- claim: stage3-small-parameters-stay-whole --> <!-- claim: zero3-gathers-again-for-backward -->

# %% [markdown] lang="zh" en="445681661ceb"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 按题目要求的论文口径：DDP 的 all-reduce 等于一次 reduce-scatter（Ψ）加一次 all-gather（Ψ），
# ZeRO-1 和 ZeRO-2 做的恰好也是这两个操作，只是用途不同：先把梯度 reduce-scatter 到负责它的 rank，
# 再把更新后的参数 all-gather 回来。这个“相等”的前提是 reduce-scatter。DeepSpeed 0.19.8 默认的 ZeRO-1/2
# （`use_multi_rank_bucket_allreduce: true`）对每个梯度桶做 all-reduce，然后再 all-gather 参数：3Ψ，是 DDP 的 1.5 倍
# （第 03 课；两种口径都打印在下面）。ZeRO-3 前向时要收集一次参数，反向时**还要**再收集一次，
# 再加上梯度的 reduce-scatter：是 DDP 的 1.5 倍（论文第 7 节）。
# **常见说法**“40 层的模型用 ZeRO-3 每步要通信 80 次”数的是调用次数而不是通信量，漏掉了 reduce-scatter，
# 也忽略了 DeepSpeed 是按子模块收集参数、把预取合并进桶里、并让小参数常驻的。调用次数取决于实现，
# 通信量在论文的 3Ψ 以内也取决于实现：DeepSpeed 在第一步记录下子模块的顺序之后，会把很快要再用到的参数
# 从前向一直保留到反向（`stage3_max_reuse_distance`、`stage3_max_live_parameters`），只有超出这个距离的参数才再收集一次。
#
# </details> <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero3-module-hooks-fetch-and-release --> <!-- claim: zero3-prefetches-along-the-recorded-trace --> <!-- claim: stage3-small-parameters-stay-whole --> <!-- claim: zero3-gathers-again-for-backward -->

# %%
if revealed("Q07"):
    from zerolab.engine import deepspeed_traffic

    print(tr("the paper's accounting:"))
    for stage in range(4):
        t = comm.traffic(P13, stage, 8)
        print(tr(f"stage {stage}: {t.volume_in_params:.0f} Ψ = ") + " + ".join(f"{c.op} ({tr(c.purpose)})" for c in t.collectives))
    print(tr("DeepSpeed 0.19.8's default (each gradient bucket all-reduced):"))
    for stage in (1, 2):
        t = comm.traffic(P13, stage, 8, bucket_allreduce=True)
        calls = deepspeed_traffic.step_traffic([P13], stage, 8, precision="fp16")["collectives"]
        print(tr(f"stage {stage}: {t.volume_in_params:.0f} Ψ = ")
              + " + ".join(f"{c['op']} ({(2 if c['op'] == 'all-reduce' else 1) * c['elements'] / P13:.0f} Ψ)"
                           for c in calls if c["elements"] > 1))

# %% [markdown]
# ## Q08: gradient accumulation (1 point)
#
# With `gradient_accumulation_steps` = 4, how many times per optimizer step does each GPU reduce the full set of
# gradients, under ZeRO-1 and under ZeRO-2? Set `Q08` to `{"zero1": ..., "zero2": ...}`.

# %% [markdown] lang="zh" en="1a1eaa7c947f"
# ## Q08：梯度累积（1 分）
#
# `gradient_accumulation_steps` = 4 时，在 ZeRO-1 和 ZeRO-2 下，
# 每个优化器步（optimizer step）里每张 GPU 要对全部梯度做几次归约？把 `Q08` 设为 `{"zero1": ..., "zero2": ...}`。

# %% nbgrader={"grade": false, "grade_id": "ex8_grad_accum", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q08 = {f"zero{stage}": next(c.times for c in comm.traffic(P13, stage, 8, grad_accum=4).collectives
                            if c.op == "reduce-scatter") for stage in (1, 2)}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex8_grad_accum", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import dict_keys, whole


def reductions(stage, gas):
    return sum(c.times for c in comm.traffic(PSI, stage, 8, grad_accum=gas).collectives if c.op == "reduce-scatter")


dict_keys(Q08, ["zero1", "zero2"], "Q08")
for _name in ("zero1", "zero2"):
    whole(Q08[_name], f"Q08['{_name}']", "a number of reductions")
assert Q08["zero1"] == reductions(1, 4), "Q08['zero1'] is not right: when does ZeRO-1 need the reduced gradients?"
assert Q08["zero2"] == reductions(2, 4), "Q08['zero2'] is not right: ZeRO-2 keeps only its own gradient partition between micro-steps"
### BEGIN HIDDEN TESTS
from zerolab.engine import comm
from zerolab.lesson.checks import dict_keys, plain

reference = {f"zero{stage}": sum(c.times for c in comm.traffic(10**9, stage, 8, grad_accum=4).collectives
                                 if c.op == "reduce-scatter") for stage in (1, 2)}
assert dict_keys(plain(Q08, "Q08"), ["zero1", "zero2"], "Q08") == reference, "Q08 is not right"
### END HIDDEN TESTS
passed("Q08")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** ZeRO-1 keeps full gradients on every GPU, so it can sum the micro-steps locally and reduce once, at the
# accumulation boundary. ZeRO-2 keeps only its partition of the gradients, so it must reduce-scatter on **every**
# micro-step (DeepSpeed's engine: "ZeRO stage >= 2 communicates during non gradient accumulation boundaries as
# well"). **A common claim**, "ZeRO-2 does one reduce-scatter per step", is wrong twice: it happens per micro-step,
# and in buckets (next question). It is not even a literal reduce-scatter in DeepSpeed 0.19.8: by default
# (`use_multi_rank_bucket_allreduce: true`) each bucket is all-reduced, in `stage_1_and_2.py`'s `average_tensor`; the
# paper and zerolab count the reduce-scatter volume. Per optimizer step the volume grows with the accumulation steps:
#
# </details> <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: zero12-reduce-buckets-by-all-reduce -->

# %% [markdown] lang="zh" en="9e1bbbf19d1c"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** ZeRO-1 在每张 GPU 上都保留完整的梯度，所以可以先在本地把各个微步的梯度累加起来，
# 到累积边界再归约一次。ZeRO-2 只保留自己那份梯度分片，
# 所以**每个**微步都必须 reduce-scatter（DeepSpeed engine 里的原话：
# “ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well”）。
# **常见说法**“ZeRO-2 每步做一次 reduce-scatter”错了两处：它每个微步都做，而且是分桶做的（见下一题）。
# 在 DeepSpeed 0.19.8 里它甚至不是字面意义上的 reduce-scatter：
# 默认情况下（`use_multi_rank_bucket_allreduce: true`）每个桶做的是 all-reduce，
# 见 `stage_1_and_2.py` 的 `average_tensor`；论文和 zerolab 统计的是 reduce-scatter 的通信量。
# 每个优化器步的通信量随累积步数增长：
#
# </details> <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: zero12-reduce-buckets-by-all-reduce -->

# %%
if revealed("Q08"):
    for stage in (1, 2, 3):
        print(tr(f"stage {stage}, gradient_accumulation_steps=4: {comm.traffic(P13, stage, 8, grad_accum=4).volume_in_params:.0f} Ψ per optimizer step"))

# %% [markdown]
# ## Q09: buckets (1 point)
#
# ZeRO-2 reduces gradients in buckets of `reduce_bucket_size` elements (default 5e8) as the backward pass produces
# them. How many buckets does one backward pass of a 13B model fill, at least (if gradients packed the buckets
# exactly)? Set `Q09` to an int. <!-- claim: zero-bucket-settings-default --> <!-- claim: zero2-reduces-buckets-during-backward -->

# %% [markdown] lang="zh" en="2005a27dd53d"
# ## Q09：分桶（1 分）
#
# ZeRO-2 在反向传播产生梯度的同时，按每桶 `reduce_bucket_size` 个元素（默认 5e8）分桶归约梯度。
# 13B 模型的一次反向传播至少要填满多少个桶（假设梯度恰好把桶装满）？把 `Q09` 设为一个 int。 <!-- claim: zero-bucket-settings-default --> <!-- claim: zero2-reduces-buckets-during-backward -->

# %% nbgrader={"grade": false, "grade_id": "ex9_buckets", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q09 = next(c.buckets for c in comm.traffic(P13, 2, 8).collectives if c.op == "reduce-scatter")
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex9_buckets", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import whole

expected = next(c.buckets for c in comm.traffic(P13, 2, 8, reduce_bucket_size=comm.DEFAULT_BUCKET).collectives if c.op == "reduce-scatter")
whole(Q09, "Q09", "a whole number of buckets")
assert Q09 != 2 * expected, "Q09 counts bytes: the bucket size counts elements (parameters), not bytes"
assert Q09 == expected, "Q09 is not right: how many elements does one bucket hold, and how many gradients are there?"
### BEGIN HIDDEN TESTS
from zerolab.engine import comm, units
from zerolab.lesson.checks import plain, whole

reference = [c.buckets for c in comm.traffic(units.parse_count("13B"), 2, 8).collectives if c.op == "reduce-scatter"][0]
assert whole(plain(Q09, "Q09"), "Q09") == reference, "Q09 is not right"
### END HIDDEN TESTS
passed("Q09")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** 13e9 gradient elements in buckets of 5e8 elements, as a lower bound: DeepSpeed flushes a bucket when
# the next parameter would overflow it (`stage_1_and_2.py`), so real layer sizes leave buckets part-full and make a
# few more. Bucket sizes count elements, not bytes; each full
# bucket is reduced while backward keeps producing the next (with `overlap_comm`). Smaller buckets mean more,
# smaller calls and less buffer memory:
#
# </details> <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: bucket-sizes-count-elements -->

# %% [markdown] lang="zh" en="e367f40f446d"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 13e9 个梯度元素，每桶 5e8 个元素，这是下限：当下一个参数会让桶溢出时，
# DeepSpeed 就把当前桶刷出去（`stage_1_and_2.py`），所以真实的层大小会让一些桶装不满，桶数也就多出几个。
# 桶大小按元素个数计，不是字节数；开启 `overlap_comm` 时，每装满一个桶就开始归约，反向传播同时继续填下一个桶。
# 桶越小，调用次数越多、每次的数据越少，缓冲区占用的显存也越少：
#
# </details> <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: bucket-sizes-count-elements -->

# %%
if revealed("Q09"):
    for bucket in (5 * 10**7, comm.DEFAULT_BUCKET, 2 * 10**9):
        t = comm.traffic(P13, 2, 8, reduce_bucket_size=bucket)
        print(tr(f"reduce_bucket_size={bucket:.0e}: {t.collectives[0].buckets} buckets per backward pass"))

# %% [markdown]
# ## Q10: `overlap_comm` (1 point)
#
# Which is true of `zero_optimization.overlap_comm` in DeepSpeed 0.19.8?
#
# - A: off by default for stages 0 to 2 and on for stage 3; in stages 1-2 it costs a second bucket buffer
# - B: on by default for every stage; it costs 4.5x `reduce_bucket_size` of extra memory
# - C: off by default for every stage; it costs nothing
# - D: on by default for stages 1 and 2 and off for stage 3; it makes communication faster
#
# Set `Q10` to a letter.

# %% [markdown] lang="zh" en="17dd84a66baf"
# ## Q10：`overlap_comm`（1 分）
#
# 关于 DeepSpeed 0.19.8 中的 `zero_optimization.overlap_comm`，下面哪一项正确？
#
# - A：stage 0 到 2 默认关闭，stage 3 默认开启；在 stage 1-2 中的代价是多一个桶缓冲区
# - B：所有 stage 默认开启；会额外占用 4.5 倍 `reduce_bucket_size` 的显存
# - C：所有 stage 默认关闭；没有任何代价
# - D：stage 1 和 2 默认开启，stage 3 默认关闭；它能让通信本身变快
#
# 把 `Q10` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex10_overlap_comm", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q10 = "A"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex10_overlap_comm", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q10, "ABCD", "Q10")
assert _letter != drill.letter("Q10", "everywhere_4_5x"), \
    "Q10 is not right: the 4.5x multiplier was deleted from DeepSpeed in 2021; and the default is not on everywhere"
assert drill.is_right("Q10", _letter), "Q10 is not right: lesson 04 printed the defaults from DeepSpeed's own config class"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q10", ["zerolab.lesson.drill"], exercise="Q10",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q10, "Q10"), "ABCD", "Q10") == drill.key("Q10"), "Q10 is not right"
### END HIDDEN TESTS
passed("Q10")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** Off by default up to stage 2, on for stage 3: a validator in `deepspeed/runtime/zero/config.py` sets `overlap_comm = (stage == 3)` when you leave it
# out (the docs table still says `false`). Overlap does not make communication faster: it runs the reduction of one
# bucket on a side stream while backward fills the next, which hides communication only as far as there is compute to
# hide it behind. In ZeRO-1/2 the price is a second reduce buffer of `reduce_bucket_size` elements; in ZeRO-3 it moves
# the reduce-scatter and the parameter all-gathers to side streams instead. **A common claim** puts it at
# "4.5x the bucket size, 9GB at the defaults": that comes from a 2020 multiplier removed in 2021 (lesson 04).
# What 0.19.8 allocates for gradient buckets at the default size, in fp16:
# <!-- claim: overlap-comm-default-by-stage --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: zero3-overlap-comm-uses-side-streams --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: zero12-bucket-buffers-no-4-5x -->
#
# </details>

# %% [markdown] lang="zh" en="d3dc2da91e61"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** stage 2 及以下默认关闭，stage 3 默认开启：`deepspeed/runtime/zero/config.py` 里有一个校验器：不写这个键时，
# 它会设置 `overlap_comm = (stage == 3)`（文档里的表格仍写着 `false`）。通信与计算重叠并不会让通信变快：
# 它在一条单独的 stream 上归约一个桶，同时反向传播去填下一个桶，能藏住多少通信，取决于有多少计算可以拿来掩盖。
# 在 ZeRO-1/2 中，代价是第二个 `reduce_bucket_size` 个元素的归约缓冲区；在 ZeRO-3 中，
# 它则是把 reduce-scatter 和参数的 all-gather 放到单独的 stream 上。**常见说法**称它要占“4.5 倍桶大小，
# 默认配置下 9GB”：这来自 2020 年的一个系数，2021 年就删掉了（第 04 课）。0.19.8 在默认桶大小、
# fp16 下为梯度桶分配的显存：
# <!-- claim: overlap-comm-default-by-stage --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: zero3-overlap-comm-uses-side-streams --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: zero12-bucket-buffers-no-4-5x -->
#
# </details>

# %%
if revealed("Q10"):
    for flag in (False, True):
        print(tr(f"overlap_comm={flag}: {units.format_bytes(comm.bucket_buffer_bytes(comm.DEFAULT_BUCKET, 'fp16', flag), 'GB')}"
                 " of gradient buckets per GPU"))

# %% [markdown]
# No DeepSpeed source supports the popular "10-30 % faster" either; the gain depends on the ratio of communication to
# compute, as lesson 03's model shows:

# %% [markdown] lang="zh" en="1374a3908b00"
# DeepSpeed 的源码里也找不到任何依据支持流行的“能快 10-30 %”的说法；收益取决于通信与计算之比，
# 第 03 课的模型已经说明了这一点：

# %%
if revealed("Q10"):
    t = comm.traffic(P13, 2, 8)
    for compute_s in (0.5, 2.0, 8.0):
        off, on = (comm.step_time(t, compute_s, link="ib-hdr", overlap_comm=flag) for flag in (False, True))
        print(tr(f"compute {compute_s:4} s: step {off.total_s:6.2f} s without overlap, {on.total_s:6.2f} s with it "
                 f"({1 - on.total_s / off.total_s:.0%} less)"))

# %% [markdown]
# ## Q11: offload traffic over PCIe (2 points)
#
# ZeRO-2 with `offload_optimizer` on CPU, 13B parameters, 8 GPUs, fp16, no gradient accumulation. How many GB cross
# each GPU's PCIe link per optimizer step, both directions together? Set `Q11` to a number of GB.

# %% [markdown] lang="zh" en="2ce035feaf20"
# ## Q11：卸载在 PCIe 上的流量（2 分）
#
# ZeRO-2，`offload_optimizer` 卸载到 CPU，13B 参数，8 张 GPU，fp16，不做梯度累积。每个优化器步里，
# 每张 GPU 的 PCIe 链路上要传输多少 GB（两个方向合计）？把 `Q11` 设为 GB 数。

# %% nbgrader={"grade": false, "grade_id": "ex11_offload_pcie", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
_t = comm.traffic(P13, 2, 8, offload_optimizer="cpu")
Q11 = (_t.host_to_device_bytes + _t.device_to_host_bytes) / units.GB
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex11_offload_pcie", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

offloaded = comm.traffic(P13, 2, 8, offload_optimizer="cpu")
expected = (offloaded.host_to_device_bytes + offloaded.device_to_host_bytes) / units.GB
close_to(Q11, expected, "Q11", 0.01, "GB",
         hint="which partition goes down to the host, which comes back up, at how many bytes per value?",
         slips={8: "that is the whole model; each GPU moves only its own partition"})
### BEGIN HIDDEN TESTS
from zerolab.engine import comm, units
from zerolab.lesson.checks import plain

offloaded = comm.traffic(units.parse_count("13B"), 2, 8, offload_optimizer="cpu")
reference = (offloaded.host_to_device_bytes + offloaded.device_to_host_bytes) / units.GB
assert abs(plain(Q11, "Q11") - reference) <= 0.01 * reference, "Q11 is not right"
### END HIDDEN TESTS
passed("Q11")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer** (DeepSpeed 0.19.8's accounting, measured by `zerolab.run.meter` on real runs). Each GPU casts its
# gradient partition (Ψ/Nd values) to fp32 on the GPU and copies it to the host's fp32 gradient: 4 bytes a value, not
# 2 (`async_inplace_copy_grad_to_fp32_buffer_from_gpu` in `stage_1_and_2.py`). CPU Adam updates the fp32 master
# weights there, and the updated fp16 partition comes back (2 bytes a value). With gradient accumulation every
# micro-step also sends the fp16 gradients to a host accumulation buffer, which comes back to be added from the
# second micro-step on. At PCIe speeds this takes:
#
# </details> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: offload-builds-deepspeed-cpu-adam -->

# %% [markdown] lang="zh" en="9ffef80b230b"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案**（DeepSpeed 0.19.8 的口径，由 `zerolab.run.meter` 在实际运行中实测）。
# 每张 GPU 先在 GPU 上把自己的梯度分片（Ψ/Nd 个值）转成 fp32，再拷贝到主机上的 fp32 梯度里：每个值 4 字节，
# 而不是 2 字节（`stage_1_and_2.py` 中的 `async_inplace_copy_grad_to_fp32_buffer_from_gpu`）。
# CPU Adam 在主机上更新 fp32 主权重，更新后的 fp16 分片再传回 GPU（每个值 2 字节）。做梯度累积时，
# 每个微步还要把 fp16 梯度送到主机上的累积缓冲区，从第二个微步起，它又要传回来参与累加。按 PCIe 的速度，
# 这些传输需要：
#
# </details> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: offload-builds-deepspeed-cpu-adam -->

# %%
if revealed("Q11"):
    for link in ("pcie3", "pcie4"):
        print(tr(f"{link}: {units.format_bytes(offloaded.device_to_host_bytes, 'GB')} down "
                 f"{comm.transfer_time(offloaded.device_to_host_bytes, link):.2f} s, "
                 f"{units.format_bytes(offloaded.host_to_device_bytes, 'GB')} up {comm.transfer_time(offloaded.host_to_device_bytes, link):.2f} s"))

# %% [markdown]
# The popular "offload makes training 2-5x slower" has no source behind it as a fixed factor: the cost depends on the
# batch (more compute per step hides more), the CPU cores running Adam, the PCIe generation and pinning.

# %% [markdown] lang="zh" en="21947d3d649e"
# 流行的“卸载会让训练慢 2-5 倍”并没有出处能支撑这样一个固定倍数：代价取决于 batch 大小（每步计算越多，
# 能掩盖的传输越多）、跑 Adam 的 CPU 核数、PCIe 代际以及是否使用锁页内存。

# %% [markdown]
# ## Q12: host RAM for offload (1 point)
#
# With the optimizer offloaded, the host holds the fp32 state DeepSpeed's CPU Adam works on: fp32 gradients, fp32
# master weights, momentum and variance. For a 13B model, how many GB is that (on one node, before any buffers)?
# Set `Q12` to a number of GB. <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-builds-deepspeed-cpu-adam -->

# %% [markdown] lang="zh" en="f2dead500320"
# ## Q12：卸载需要的主机内存（1 分）
#
# 卸载优化器后，主机上保存着 DeepSpeed 的 CPU Adam 要用的 fp32 状态：fp32 梯度、fp32 主权重、动量和方差。
# 对 13B 模型，这些一共占多少 GB（单节点，不计任何缓冲区）？把 `Q12` 设为 GB 数。 <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-builds-deepspeed-cpu-adam -->

# %% nbgrader={"grade": false, "grade_id": "ex12_host_ram", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
_host = memory.estimate(P13, 3, gpus_per_node=8, offload_optimizer="cpu", accounting="deepspeed").breakdown["cpu"]
Q12 = (_host["fp32_grads"] + _host["master_weights"] + _host["optimizer_states"]) / units.GB
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex12_host_ram", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

host = memory.estimate(P13, 3, gpus_per_node=8, offload_optimizer="cpu", accounting="deepspeed").breakdown["cpu"]
expected = (host["fp32_grads"] + host["master_weights"] + host["optimizer_states"]) / units.GB
close_to(Q12, expected, "Q12", 0.01, "GB", hint="four fp32 values per parameter",
         slips={0.75: "that leaves out one of the four fp32 tensors: gradients, master weights, momentum, variance"})
### BEGIN HIDDEN TESTS
from zerolab.engine import memory, units
from zerolab.lesson.checks import close_to, plain

host = memory.estimate(units.parse_count("13B"), 3, gpus_per_node=8, offload_optimizer="cpu", accounting="deepspeed").breakdown["cpu"]
reference = (host["fp32_grads"] + host["master_weights"] + host["optimizer_states"]) / units.GB
close_to(plain(Q12, "Q12"), reference, "Q12", 0.01, "GB")
### END HIDDEN TESTS
passed("Q12")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** 4 + 4 + 4 + 4 bytes per parameter. That is the floor; DeepSpeed's estimator multiplies by its
# `additional_buffer_factor` and, for ZeRO-2, takes the larger of this and the load-time peak of every process
# building the fp32 model on the CPU. That peak grows with the GPU processes, and DeepSpeed's code
# (`estimate_zero2_model_states_mem_needs`) multiplies by all GPUs over all nodes, not the GPUs per node its docs
# name, so for several nodes it over-estimates each node (lesson 04's references). Offload's first
# failure is usually the host, not the GPU: processes killed with exit code -9.
#
# </details> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: zero2-estimator-host-counts-every-nodes-gpus -->

# %% [markdown] lang="zh" en="3a9f71f8dea1"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 每个参数 4 + 4 + 4 + 4 字节。这只是下限：
# DeepSpeed 的估算函数还会乘上它的 `additional_buffer_factor`；对 ZeRO-2，
# 它还会在这个值和加载时的峰值之间取较大者，加载峰值来自每个进程都在 CPU 上构建一份 fp32 模型。
# 这个峰值随 GPU 进程数增长，
# 而 DeepSpeed 的代码（`estimate_zero2_model_states_mem_needs`）乘的是所有节点的 GPU 总数，
# 而不是其文档所说的每节点 GPU 数，所以多节点时它会高估每个节点的需求（见第 04 课的参考资料）。
# 卸载最先出问题的通常是主机而不是 GPU：进程被杀，退出码 -9。
#
# </details> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: zero2-estimator-host-counts-every-nodes-gpus -->

# %%
if revealed("Q12"):
    print(tr("additional_buffer_factor (DeepSpeed's default):"), memory.DEFAULT_BUFFER_FACTOR)
    for gpus in (1, 8):
        e = memory.estimate(P13, 2, gpus_per_node=gpus, offload_optimizer="cpu", accounting="deepspeed")
        print(tr(f"ZeRO-2 + CPU offload, {gpus} GPU(s) per node: DeepSpeed estimates {units.format_bytes(e.cpu_bytes, 'GiB')} of host RAM"))

# %% [markdown]
# ## Q13: `pin_memory` (1 point)
#
# Which is true of `offload_optimizer.pin_memory` in DeepSpeed 0.19.8?
#
# - A: pinned memory is extra host memory on top of the offloaded state, so it doubles host RAM
# - B: it is off by default and should always be turned on
# - C: it page-locks the host buffers so GPU copies run asynchronously at full PCIe speed; it is on by default, and
#   hosts with little RAM should turn it off
# - D: it pins the GPU memory so that PyTorch cannot free it
#
# Set `Q13` to a letter.

# %% [markdown] lang="zh" en="ea893cf6a7be"
# ## Q13：`pin_memory`（1 分）
#
# 关于 DeepSpeed 0.19.8 中的 `offload_optimizer.pin_memory`，下面哪一项正确？
#
# - A：锁页内存是在卸载的状态之外额外占用的主机内存，所以主机内存要翻倍
# - B：默认关闭，应该一律打开
# - C：它把主机缓冲区锁页，让 GPU 的拷贝能以 PCIe 满速异步进行；默认开启，内存小的主机应当关掉
# - D：它把显存钉住，让 PyTorch 无法释放
#
# 把 `Q13` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex13_pin_memory", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q13 = "C"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex13_pin_memory", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q13, "ABCD", "Q13")
assert _letter != drill.letter("Q13", "off_by_default"), \
    "Q13 is not right: that was true of older DeepSpeed versions; 0.19.8 changed the default"
assert drill.is_right("Q13", _letter), "Q13 is not right: pinning is about host memory and how the GPU copies from it"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q13", ["zerolab.lesson.drill"], exercise="Q13",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q13, "Q13"), "ABCD", "Q13") == drill.key("Q13"), "Q13 is not right"
### END HIDDEN TESTS
passed("Q13")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** Page-locked (pinned) memory cannot be swapped out, so the GPU can copy from it by DMA, asynchronously
# and at full speed; pageable memory goes through a staging copy. It makes no second copy: the same buffers are
# pinned. <!-- claim: pinned-buffers-round-to-a-power-of-two --> It does cost some extra RAM: torch's pinned
# allocator, DeepSpeed's default path, rounds each buffer up to the next power of two. Since a 2026 DeepSpeed change the default is true (older tutorials say false). Because pinned pages cannot be
# paged out, small hosts (free Colab, WSL2) run out of memory with it; there set `pin_memory: false`.
#
# </details> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: offload-pin-memory-defaults-true -->

# %% [markdown] lang="zh" en="53524322d52d"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 锁页（pinned）内存不会被换出，所以 GPU 可以通过 DMA 从中异步、全速地拷贝；
# 可分页内存则要先经过一次中转拷贝。它不会多出一份拷贝：被锁页的就是那些缓冲区本身。
# <!-- claim: pinned-buffers-round-to-a-power-of-two -->不过它确实会多占一些内存：DeepSpeed 默认走的 torch 锁页分配器会把每个缓冲区向上取整到 2 的幂。
# 自 2026 年 DeepSpeed 的一次改动起，默认值是 true（较早的教程写的是 false）。由于锁页内存无法换出，
# 内存小的主机（免费版 Colab、WSL2）开着它会内存不足；这时请设置 `pin_memory: false`。
#
# </details> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: offload-pin-memory-defaults-true -->

# %% [markdown]
# ## Q14: fp16 or bf16 (1 point)
#
# Which precision do you enable on a T4 (free Colab) and on an A100? Set `Q14` to `{"T4": ..., "A100": ...}` with
# `"fp16"` or `"bf16"` as values.

# %% [markdown] lang="zh" en="c581e11f479f"
# ## Q14：fp16 还是 bf16（1 分）
#
# 在 T4（免费版 Colab）和 A100 上分别该启用哪种精度？把 `Q14` 设为 `{"T4": ..., "A100": ...}`，
# 值为 `"fp16"` 或 `"bf16"`。

# %% nbgrader={"grade": false, "grade_id": "ex14_precision", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q14 = {"T4": "fp16", "A100": "bf16"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex14_precision", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice, dict_keys

dict_keys(Q14, ["T4", "A100"], "Q14")
assert choice(Q14["T4"], ["fp16", "bf16"], "Q14['T4']") == drill.precision("T4"), \
    "Q14['T4'] is not right: T4 is Turing (compute capability 7.5): it has no bf16 tensor cores"
assert choice(Q14["A100"], ["fp16", "bf16"], "Q14['A100']") == drill.precision("A100"), \
    "Q14['A100'] is not right: A100 (Ampere, 8.0) runs bf16 natively, and bf16 needs no loss scaling"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q14", ["zerolab.lesson.drill"], exercise="Q14",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson.checks import choice, dict_keys, plain

from zerolab.lesson import drill

answer = dict_keys(plain(Q14, "Q14"), ["T4", "A100"], "Q14")
assert {gpu: choice(answer[gpu], ["fp16", "bf16"], f"Q14['{gpu}']") for gpu in answer} == \
    {gpu: drill.precision(gpu) for gpu in ("T4", "A100")}, \
    "Q14 is not right"
### END HIDDEN TESTS
passed("Q14")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** bf16 keeps fp32's exponent range, so it needs no loss scaling; it is fast from Ampere (compute
# capability 8.0) on. Older cards (T4, V100) train in fp16 with dynamic loss scaling. Both use 2 bytes, so memory is
# the same. Enabling both is an error ("bfloat16 and fp16 modes cannot be simultaneously enabled").
#
# </details> <!-- claim: bf16-and-fp16-take-2-bytes --> <!-- claim: fp16-loss-scale-zero-is-dynamic --> <!-- claim: bf16-overflows-a-little-below-fp32s-largest-value --> <!-- claim: config-refuses-fp16-with-bf16-and-mics -->

# %% [markdown] lang="zh" en="efa9322cbbe8"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** bf16 保留了 fp32 的指数范围，所以不需要损失缩放；从 Ampere（计算能力 8.0）开始它才跑得快。
# 更老的卡（T4、V100）用 fp16 加动态损失缩放来训练。两者都占 2 字节，所以显存占用相同。
# 两者同时启用会报错（“bfloat16 and fp16 modes cannot be simultaneously enabled”）。
#
# </details> <!-- claim: bf16-and-fp16-take-2-bytes --> <!-- claim: fp16-loss-scale-zero-is-dynamic --> <!-- claim: bf16-overflows-a-little-below-fp32s-largest-value --> <!-- claim: config-refuses-fp16-with-bf16-and-mics -->

# %% [markdown]
# ## Q15: batch arithmetic (1 point)
#
# 16 GPUs run tensor parallelism of degree 2 (so pairs of GPUs share one model replica). `train_batch_size` is 512 and
# `train_micro_batch_size_per_gpu` is 4. What must `gradient_accumulation_steps` be? Set `Q15` to an int.

# %% [markdown] lang="zh" en="4f28f09e224e"
# ## Q15：batch size 换算（1 分）
#
# 16 张 GPU 做并行度为 2 的张量并行（即每两张 GPU 共用一个模型副本）。`train_batch_size` 为 512，
# `train_micro_batch_size_per_gpu` 为 4。`gradient_accumulation_steps` 必须是多少？把 `Q15` 设为一个 int。

# %% nbgrader={"grade": false, "grade_id": "ex15_batch", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q15 = 16
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex15_batch", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import whole
from zerolab.config import read_settings

batch = {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4}
whole(Q15, "Q15", "a whole number of steps")
assert Q15 != read_settings(batch, world_size=16).grad_accum, \
    "Q15 is not right: the world size in the batch formula is the number of data-parallel replicas, not of GPUs"
assert Q15 == read_settings(batch, world_size=16 // 2).grad_accum, \
    "Q15 is not right: train_batch_size = micro batch x accumulation steps x data-parallel replicas"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import plain, whole
from zerolab.config import read_settings

assert whole(plain(Q15, "Q15"), "Q15") == read_settings({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4},
                                                        world_size=16 // 2).grad_accum, "Q15 is not right"
### END HIDDEN TESTS
passed("Q15")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** DeepSpeed checks `train_batch_size == micro batch x gradient_accumulation_steps x world size`, where the
# world size is the **data-parallel** size (the model-parallel unit's data-parallel group, or the GPUs divided by the
# sequence-parallel degree). Here 16 GPUs in pairs make 8 replicas. When DeepSpeed derives a missing value it uses
# floor division, so a global batch that does not divide fails its own check (lesson 04).
#
# </details> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: batch-term-derived-by-floor-division -->

# %% [markdown] lang="zh" en="b51f6eb0829e"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** DeepSpeed 检查的是 `train_batch_size == micro batch x gradient_accumulation_steps x world size`，
# 其中 world size 指**数据并行**的规模（模型并行单元里数据并行组的大小，或者 GPU 数除以序列并行度）。
# 这里 16 张 GPU 两两一组，构成 8 个副本。DeepSpeed 推算没有给出的那个值时用的是向下取整的除法，
# 所以全局 batch 除不尽时，会通不过它自己的检查（第 04 课）。
#
# </details> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: batch-term-derived-by-floor-division -->

# %% [markdown]
# ## Q16: FSDP and ZeRO (1 point)
#
# PyTorch FSDP's sharding strategies roughly match ZeRO stages. Set `Q16` to
# `{"FULL_SHARD": ..., "SHARD_GRAD_OP": ..., "NO_SHARD": ...}` with the ZeRO stage (an int, 0 for plain data
# parallelism) closest to each. <!-- claim: fsdp-strategies-and-zero-stages -->

# %% [markdown] lang="zh" en="6e9e5c5d5e65"
# ## Q16：FSDP 与 ZeRO（1 分）
#
# PyTorch FSDP 的几种切分策略（sharding strategy）大致对应 ZeRO 的各个 stage。
# 把 `Q16` 设为 `{"FULL_SHARD": ..., "SHARD_GRAD_OP": ..., "NO_SHARD": ...}`，
# 值为与每种策略最接近的 ZeRO stage（int，普通数据并行记为 0）。 <!-- claim: fsdp-strategies-and-zero-stages -->

# %% nbgrader={"grade": false, "grade_id": "ex16_fsdp", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q16 = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex16_fsdp", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import dict_keys, whole

dict_keys(Q16, ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"], "Q16")
for _name in Q16:
    whole(Q16[_name], f"Q16['{_name}']", "a ZeRO stage, 0 to 3")
assert Q16["FULL_SHARD"] == drill.FSDP_STAGE["FULL_SHARD"], \
    "Q16['FULL_SHARD'] is not right: FULL_SHARD shards parameters, gradients and optimizer states"
assert Q16["SHARD_GRAD_OP"] == drill.FSDP_STAGE["SHARD_GRAD_OP"], \
    "Q16['SHARD_GRAD_OP'] is not right: SHARD_GRAD_OP shards gradients and optimizer states"
assert Q16["NO_SHARD"] == drill.FSDP_STAGE["NO_SHARD"], \
    "Q16['NO_SHARD'] is not right: NO_SHARD all-reduces like DDP"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q16", ["zerolab.lesson.drill"], exercise="Q16",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import dict_keys, plain

assert dict_keys(plain(Q16, "Q16"), ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"], "Q16") == drill.FSDP_STAGE, \
    "Q16 is not right"
### END HIDDEN TESTS
passed("Q16")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** `FULL_SHARD` ≈ ZeRO-3, `SHARD_GRAD_OP` ≈ ZeRO-2, `NO_SHARD` ≈ DDP (Hugging Face Accelerate's FSDP guide
# gives this mapping). The match is loose: `SHARD_GRAD_OP` gathers the parameters before forward and frees them after
# backward, while DeepSpeed's ZeRO-2 keeps the fp16 parameters whole all the time. `HYBRID_SHARD` (full sharding
# within a node, replicas across nodes) is closest to ZeRO++'s hpZ. ZeRO-1 has no FSDP strategy; PyTorch's
# `ZeroRedundancyOptimizer` is its counterpart. FSDP2's `fully_shard` replaces the enum with
# `reshard_after_forward` (True ≈ `FULL_SHARD`, False ≈ `SHARD_GRAD_OP`).
#
# </details> <!-- claim: fsdp-strategies-and-zero-stages --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: fsdp-hybrid-shard-within-a-node --> <!-- claim: zero-redundancy-optimizer-shards-only-states --> <!-- claim: fsdp2-reshard-after-forward -->

# %% [markdown] lang="zh" en="975397b9145d"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** `FULL_SHARD` ≈ ZeRO-3，`SHARD_GRAD_OP` ≈ ZeRO-2，
# `NO_SHARD` ≈ DDP（Hugging Face Accelerate 的 FSDP 指南给出的就是这个对应关系）。这种对应并不严格：
# `SHARD_GRAD_OP` 在前向之前收集参数、在反向之后释放，而 DeepSpeed 的 ZeRO-2 始终保留完整的 fp16 参数。
# `HYBRID_SHARD`（节点内完全切分，节点间保留副本）最接近 ZeRO++ 的 hpZ。ZeRO-1 没有对应的 FSDP 策略；
# 与它对应的是 PyTorch 的 `ZeroRedundancyOptimizer`。
# FSDP2 的 `fully_shard` 用 `reshard_after_forward` 取代了这个枚举（True ≈ `FULL_SHARD`，
# False ≈ `SHARD_GRAD_OP`）。
#
# </details> <!-- claim: fsdp-strategies-and-zero-stages --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: fsdp-hybrid-shard-within-a-node --> <!-- claim: zero-redundancy-optimizer-shards-only-states --> <!-- claim: fsdp2-reshard-after-forward -->

# %% [markdown]
# ## Q17: activations and sequence length (1 point)
#
# Activations are what the forward pass keeps for backward (Korthikanti et al. 2022, section 4; lesson 01,
# section 5). A GPT layer uses an explicit softmax attention that keeps its s x s scores, and no recomputation.
# You double the sequence length and keep the micro-batch. The layer's activation memory is multiplied by:
#
# - A: exactly 2
# - B: more than 2 but less than 4
# - C: exactly 4
# - D: nothing: ZeRO partitions activations over the GPUs
#
# Set `Q17` to a letter.

# %% [markdown] lang="zh" en="0eaf3ef587d7"
# ## Q17：激活值与序列长度（1 分）
#
# 激活值是前向传播为反向传播保留下来的张量（Korthikanti et al. 2022，第 4 节；第 01 课第 5 节）。
# 某个 GPT 层使用显式的 softmax 注意力，保留 s x s 的注意力分数，而且不做重计算。序列长度翻倍、
# 微批次（micro-batch）不变，这一层的激活值显存变为原来的：
#
# - A：正好 2 倍
# - B：大于 2 倍、小于 4 倍
# - C：正好 4 倍
# - D：不变：ZeRO 会把激活值切分到各张 GPU 上
#
# 把 `Q17` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex17_activations_sequence", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q17 = "B"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex17_activations_sequence", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q17, "ABCD", "Q17")
assert _letter != drill.letter("Q17", "partitioned"), \
    "Q17 is not right: ZeRO partitions model states; each GPU keeps the activations of its own micro-batch"
assert drill.is_right("Q17", _letter), "Q17 is not right: which terms of sbh(34 + 5as/h) grow with s, and which with s squared?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q17", ["zerolab.lesson.drill"], exercise="Q17",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.engine.activations import layer_terms
from zerolab.lesson.checks import choice, plain
from zerolab.engine.models import preset

_model = preset("llama2-7b")
_growth = (sum(layer_terms(_model, 8192, 2, "bf16", "standard").values())
           / sum(layer_terms(_model, 4096, 2, "bf16", "standard").values()))
assert 2 < _growth < 4, "the course's own activation model no longer puts the growth between 2 and 4"
from zerolab.lesson import drill

assert choice(plain(Q17, "Q17"), "ABCD", "Q17") == drill.key("Q17"), "Q17 is not right"
### END HIDDEN TESTS
passed("Q17")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** More than 2 but less than 4. Per layer the paper counts sbh(34 + 5as/h) bytes: the 34sbh part (inputs of the linear layers,
# norms, GeLU) grows with s, the 5as²b part (softmax output, its dropout mask and output) with s². So the factor is
# between 2 and 4, closer to 4 the longer the sequence. A fused ("flash") attention keeps no scores, and then the
# answer is exactly 2; so does selective recomputation, which recomputes the scores in backward (the cell below).
#
# </details> <!-- claim: fused-attention-keeps-no-scores -->

# %% [markdown] lang="zh" en="b77b5ec976d4"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 大于 2 倍、小于 4 倍。论文按每层 sbh(34 + 5as/h) 字节计算：34sbh 这部分（线性层的输入、norm、GeLU）随 s 增长，
# 5as²b 这部分（softmax 的输出、它的 dropout 掩码和 dropout 输出）随 s² 增长。所以倍数在 2 到 4 之间，
# 序列越长越接近 4。融合（“flash”）注意力不保留分数，这时答案正好是 2；选择性重计算在反向时重算分数，
# 答案同样是 2（见下面的单元格）。
#
# </details> <!-- claim: fused-attention-keeps-no-scores -->

# %%
if revealed("Q17"):
    from zerolab.engine.activations import layer_terms
    from zerolab.engine.models import preset

    for attention in ("standard", "flash"):
        model = preset("gpt3-13b")
        growth = (sum(layer_terms(model, 4096, 1, "fp16", attention).values())
                  / sum(layer_terms(model, 2048, 1, "fp16", attention).values()))
        print(tr(f"{attention:8s} attention: 2048 -> 4096 tokens multiplies a layer's activations by {growth:.2f}"))

# %% [markdown]
# ## Q18: what activation checkpointing keeps (1 point)
#
# Llama 2 7B (32 layers, hidden 4096) trains in bf16 with sequences of 4096 tokens, micro-batch 1 and full
# activation recomputation (activation checkpointing): during forward each layer keeps only its input. How many
# GB (10^9 bytes) do those kept inputs take on each GPU, all layers together? Set `Q18` to a number of GB. <!-- claim: checkpoint-keeps-only-each-layer-input -->

# %% [markdown] lang="zh" en="0c8f1630c0a9"
# ## Q18：激活检查点留下了什么（1 分）
#
# Llama 2 7B（32 层，hidden 4096）用 bf16 训练，序列长度 4096 个 token，微批次 1，
# 做完全的激活重计算（激活检查点）：前向时每层只保留自己的输入。所有层加起来，
# 这些保留的输入在每张 GPU 上占多少 GB（10^9 字节）？把 `Q18` 设为 GB 数。 <!-- claim: checkpoint-keeps-only-each-layer-input -->

# %% nbgrader={"grade": false, "grade_id": "ex18_checkpointed_inputs", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q18 = 32 * 4096 * 1 * 4096 * 2 / 1e9
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex18_checkpointed_inputs", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.engine.activations import activation_memory
from zerolab.engine.models import preset

from zerolab.lesson.checks import close_to

_kept = activation_memory(preset("llama2-7b"), 4096, 1, "bf16", "flash", "full")
close_to(Q18, _kept.layers * _kept.layer_bytes / 1e9, "Q18", 0.01, "GB",
         slips={2: "bf16 takes 2 bytes per value, not 4", 0.5: "count the bytes of a bf16 value, not half of them",
                1 / 32: "every one of the 32 layers keeps its input"},
         hint="each layer keeps one tensor of sequence x micro-batch x hidden values")
### BEGIN HIDDEN TESTS
from zerolab.engine.activations import activation_memory
from zerolab.lesson.checks import close_to, plain
from zerolab.engine.models import preset

_kept = activation_memory(preset("llama2-7b"), 4096, 1, "bf16", "flash", "full")
close_to(plain(Q18, "Q18"), _kept.layers * _kept.layer_bytes / 1e9, "Q18", 0.01, "GB")
### END HIDDEN TESTS
passed("Q18")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** The paper's 2sbh bytes per layer, 2sbhL in all (section 4.2). That is what stays between forward and
# backward; during the backward pass one layer at a time runs its forward again and holds its full activations, so
# the peak is that plus one layer's worth (`zerolab.engine.activations` counts it as `working`). Full recomputation costs
# about one more forward pass, roughly a third more compute (the cell below prints both).
#
# </details> <!-- claim: checkpoint-recomputes-each-layer-in-backward -->

# %% [markdown] lang="zh" en="a00bac02598f"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 论文里每层 2sbh 字节，合计 2sbhL（第 4.2 节）。这是前向和反向之间一直保留的部分；反向传播时，
# 每次有一层重新跑一遍前向并持有它的完整激活值，
# 所以峰值是这部分再加上一层的量（`zerolab.engine.activations` 把它记作 `working`）。完全重计算大约要多跑一次前向，
# 也就是多出约三分之一的计算量（下面的单元格把两种情况都打印出来）。
#
# </details> <!-- claim: checkpoint-recomputes-each-layer-in-backward -->

# %%
if revealed("Q18"):
    for recompute in ("none", "full"):
        act = activation_memory(preset("llama2-7b"), 4096, 1, "bf16", "flash", recompute)
        print(tr(f"recompute {recompute:4s}: kept by the layers {units.format_bytes(act.layers * act.layer_bytes):>9}, "
                 f"while one layer recomputes {units.format_bytes(sum(act.working.values())):>9}, "
                 f"total {units.format_bytes(act.total_bytes):>9}"))

# %% [markdown]
# ## Q19: the estimate said it fits (1 point)
#
# A memory calculator that counts activations as the Megatron paper does says your Llama 2 7B fine-tune fits with
# ZeRO-3, no offload and no recomputation, at the micro-batch it picked. Hugging Face's Trainer runs out of GPU
# memory in the first backward pass. What is the most likely reason?
#
# - A: DeepSpeed partitions the optimizer states only after the first step, so the first step holds them whole
# - B: the calculator left out the gradients, which ZeRO never partitions
# - C: PyTorch's caching allocator frees nothing until the optimizer step ends
# - D: the calculator counted activations as Megatron's GPT layer keeps them; Hugging Face's Llama code keeps
#   more (an fp32 copy of the input in each RMSNorm) and starts backward with the loss's fp32 gradients over the
#   whole vocabulary
#
# Set `Q19` to a letter.

# %% [markdown] lang="zh" en="6aab241b259d"
# ## Q19：估算说放得下（1 分）
#
# 某个显存计算器按 Megatron 论文的口径统计激活值，它说你的 Llama 2 7B 微调在 ZeRO-3、不卸载、不重计算、
# 用它选的微批次时放得下。Hugging Face 的 Trainer 却在第一次反向传播时 GPU 显存不足。最可能的原因是什么？
#
# - A：DeepSpeed 要到第一步之后才切分优化器状态，所以第一步持有完整的优化器状态
# - B：计算器漏算了梯度，而 ZeRO 从不切分梯度
# - C：PyTorch 的缓存分配器在优化器步结束之前什么都不释放
# - D：计算器按 Megatron 的 GPT 层统计激活值；Hugging Face 的 Llama 代码保存得更多（每个 RMSNorm 一份输入的
#   fp32 副本），而且反向传播一开始就有损失在整个词表上的 fp32 梯度
#
# 把 `Q19` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex19_estimate_said_it_fits", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q19 = "D"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex19_estimate_said_it_fits", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q19, "ABCD", "Q19")
assert _letter != drill.letter("Q19", "first_step"), \
    "Q19 is not right: DeepSpeed partitions the optimizer states when it builds the engine, before any step"
assert _letter != drill.letter("Q19", "no_gradients"), \
    "Q19 is not right: ZeRO-2 and ZeRO-3 partition the gradients, and the calculator counted them"
assert drill.is_right("Q19", _letter), "Q19 is not right: which term of the budget depends on whose code runs the model?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q19", ["zerolab.lesson.drill"], exercise="Q19",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.sizing.fit import fit as _fit
from zerolab.engine.models import preset as _preset


def _micro(implementation):
    rows = _fit(_preset("llama2-7b"), 4096, 48 * 10**9, 8, headroom=0, implementation=implementation).rows
    return next((o.micro_batch for o in rows if (o.stage, o.offload_optimizer, o.offload_param, o.recompute)
                 == (3, "none", "none", "none")), 0)


assert _micro("hf") < _micro("megatron"), "the course's own budget no longer shows the premise of Q19"
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q19, "Q19"), "ABCD", "Q19") == drill.key("Q19"), "Q19 is not right"
### END HIDDEN TESTS
passed("Q19")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** D. The optimizer states are partitioned when the engine is built (each rank's optimizer is given only
# its fp32 partition; Adam's moments, made at the first step, are partition-sized), and every stage counts the
# gradients; what the calculator got wrong is whose code keeps the activations. `zerolab fit` counts Hugging Face's
# code for Llama-family models, checked against simulations of the whole models (`docs/fit_ledger.md`); the cell
# below sets the two accountings side by side on eight 48 GB GPUs.
#
# </details> <!-- claim: zero-partitions-optimizer-states-at-initialize --> <!-- claim: hf-rmsnorm-keeps-fp32-input --> <!-- claim: hf-causal-lm-loss-fp32-vocabulary-gradient --> <!-- claim: hf-llama-attention-output-once -->

# %% [markdown] lang="zh" en="08c139eeeb5a"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** D。优化器状态在构建引擎时就已切分（每个 rank 的优化器只拿到自己的 fp32 分片；
# Adam 的动量在第一步才创建，也只有分片大小），每个 stage 也都统计了梯度；计算器错在激活值由谁的代码保存。
# 对 Llama 系列模型，`zerolab fit` 按 Hugging Face 的代码统计，并与整个模型的模拟结果核对过（`docs/fit_ledger.md`）；
# 下面的单元格在 8 张 48 GB 的 GPU 上把两种口径并列。
#
# </details> <!-- claim: zero-partitions-optimizer-states-at-initialize --> <!-- claim: hf-rmsnorm-keeps-fp32-input --> <!-- claim: hf-causal-lm-loss-fp32-vocabulary-gradient --> <!-- claim: hf-llama-attention-output-once -->

# %%
if revealed("Q19"):
    from zerolab.sizing.fit import fit
    from zerolab.engine.models import preset

    for implementation in ("megatron", "hf"):
        result = fit(preset("llama2-7b"), 4096, 48 * 10**9, 8, headroom=0, implementation=implementation)
        row = next(o for o in result.rows + result.rejected
                   if (o.stage, o.offload_optimizer, o.offload_param, o.recompute) == (3, "none", "none", "none"))
        verdict = tr(f"fits micro-batch {row.micro_batch}") if row.fits else tr("does not fit one sequence")
        print(tr(f"{implementation:8s}: ZeRO-3 {verdict}: activations {units.format_bytes(row.budget.gpu['activations'])}"
                 f" of {units.format_bytes(row.budget.gpu_bytes)} per 48 GB GPU"))

# %% [markdown]
# ## Q20: what a ZeRO-3 checkpoint holds (1 point)
#
# A ZeRO-3 job on 2 GPUs calls `engine.save_checkpoint(dir)` with DeepSpeed's defaults. What does the tag's
# folder hold?
#
# - A: per rank: a model-states file whose weights are empty placeholders, and an optimizer-states file with that
#   rank's fp32 master weights and Adam moments (`latest` and the `zero_to_fp32.py` script go one level up,
#   beside the tag's folder)
# - B: one file with the whole model in fp32, ready for `torch.load`
# - C: on every rank, the whole bf16 model and all its Adam states
# - D: per rank, that rank's bf16 shard of the weights; the optimizer states are not saved
#
# Set `Q20` to a letter.

# %% [markdown] lang="zh" en="596a6673fa21"
# ## Q20：ZeRO-3 检查点里有什么（1 分）
#
# 一个在 2 张 GPU 上运行的 ZeRO-3 作业用 DeepSpeed 的默认设置调用 `engine.save_checkpoint(dir)`。
# 这个 tag 的文件夹里有什么？
#
# - A：每个 rank：一个模型状态文件，其中的权重是空的占位张量；一个优化器状态文件，保存该 rank 的 fp32 主权重和 Adam 动量；（`latest` 和 `zero_to_fp32.py` 脚本写在上一层，与 tag 文件夹并列）
# - B：一个文件，保存整个 fp32 模型，可以直接 `torch.load`
# - C：每个 rank 都保存整个 bf16 模型及其全部 Adam 状态
# - D：每个 rank 保存自己那一份 bf16 权重分片；优化器状态不保存
#
# 把 `Q20` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex20_zero3_checkpoint", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q20 = "A"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex20_zero3_checkpoint", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q20, "ABCD", "Q20")
assert _letter != drill.letter("Q20", "whole_fp32"), \
    "Q20 is not right: that one fp32 file is what zero_to_fp32 makes from the checkpoint afterwards"
assert _letter != drill.letter("Q20", "weights_only"), \
    "Q20 is not right: a checkpoint must resume training, so the optimizer states are in it"
assert drill.is_right("Q20", _letter), "Q20 is not right: which rank holds what at stage 3, and what does resuming need?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q20", ["zerolab.lesson.drill"], exercise="Q20",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q20, "Q20"), "ABCD", "Q20") == drill.key("Q20"), "Q20 is not right"
### END HIDDEN TESTS
passed("Q20")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** A. Each rank writes what it holds: its partition of the fp32 master weights and of Adam's
# moments in its own optimizer file (12 bytes per parameter, divided by the ranks), and a model-states file whose
# parameters are the empty placeholders ZeRO-3 leaves in the module. One level up, in the folder given to
# `save_checkpoint`, `latest` names the tag and DeepSpeed's `zero_to_fp32.py` (copied there) rebuilds the whole
# fp32 model from the optimizer files. Lesson 09 lists the real files and their bytes.
# <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions --> <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master -->
#
# </details>

# %% [markdown] lang="zh" en="6321e7609268"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** A。每个 rank 写下自己持有的内容：它那一份 fp32 主权重和 Adam 动量放在自己的优化器文件里（每个参数 12 字节，再除以 rank 数）；
# 模型状态文件里的参数则是 ZeRO-3 留在模块里的空占位张量。上一层、也就是传给 `save_checkpoint` 的文件夹里，`latest` 记下 tag，
# DeepSpeed 复制到那里的 `zero_to_fp32.py` 能从优化器文件重建整个 fp32 模型。第 09 课会列出真实的文件和字节数。
# <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions --> <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master -->
#
# </details>

# %% [markdown]
# ## Q21: resuming on another number of GPUs (1 point)
#
# A ZeRO-2 job saved its checkpoint on 2 GPUs; the next allocation has 3. How do you resume with the optimizer
# states intact?
#
# - A: nothing: `load_checkpoint` re-partitions the optimizer states for any number of ranks
# - B: convert it with `python -m deepspeed.checkpoint.ds_to_universal`, then resume with `"checkpoint":
#   {"load_universal": true}`
# - C: consolidate it with `zero_to_fp32` and resume from the fp32 weights: the Adam states come back with them
# - D: nothing can: a ZeRO checkpoint resumes only on the number of ranks that saved it
#
# Set `Q21` to a letter.

# %% [markdown] lang="zh" en="187b1a9ee574"
# ## Q21：换一个 GPU 数量恢复训练（1 分）
#
# 一个 ZeRO-2 作业在 2 张 GPU 上保存了检查点；下一次分到的是 3 张。怎样恢复训练并保留优化器状态？
#
# - A：什么都不用做：`load_checkpoint` 会按任意 rank 数重新切分优化器状态
# - B：用 `python -m deepspeed.checkpoint.ds_to_universal` 转换，然后用 `"checkpoint": {"load_universal": true}` 恢复
# - C：用 `zero_to_fp32` 合并，再从 fp32 权重恢复：Adam 状态也会一起回来
# - D：没有办法：ZeRO 检查点只能在保存它时的 rank 数上恢复
#
# 把 `Q21` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex21_resume_elsewhere", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q21 = "B"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex21_resume_elsewhere", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q21, "ABCD", "Q21")
assert _letter != drill.letter("Q21", "just_load"), \
    "Q21 is not right: DeepSpeed refuses a ZeRO checkpoint saved by another number of ranks (lesson 09 shows its message)"
assert _letter != drill.letter("Q21", "fp32_restart"), \
    "Q21 is not right: zero_to_fp32 keeps the weights only; Adam's moments and step are lost"
assert drill.is_right("Q21", _letter), "Q21 is not right: which conversion makes a checkpoint independent of the number of ranks?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q21", ["zerolab.lesson.drill"], exercise="Q21",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q21, "Q21"), "ABCD", "Q21") == drill.key("Q21"), "Q21 is not right"
### END HIDDEN TESTS
passed("Q21")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** B. A ZeRO checkpoint stores each rank's flat partition, cut for the number of ranks that saved it,
# and DeepSpeed refuses to load it on another. `ds_to_universal` rewrites it as one file per parameter (its fp32
# weights and each Adam moment; a plain model's stage 1-2 save lacks the `universal_checkpoint_info` it needs, which
# `--inject_missing_state` adds); with `load_universal` every rank takes its own slice for the new number of
# ranks, and training continues with its optimizer state. Lesson 09 resumes a 2-rank checkpoint on 3 ranks this way.
#
# </details> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: universal-checkpoint-per-parameter --> <!-- claim: universal-info-needed-at-stages-1-2 -->

# %% [markdown] lang="zh" en="b746a738a99c"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** B。ZeRO 检查点保存的是每个 rank 的扁平分片，按保存时的 rank 数切分，DeepSpeed 拒绝在别的 rank 数上加载它。
# `ds_to_universal` 把它改写成每个参数一个文件（fp32 权重和每个 Adam 动量；普通模型在 stage 1-2 的保存里缺少它需要的
# `universal_checkpoint_info`，加上 `--inject_missing_state` 就会补上）；打开 `load_universal` 后，每个 rank 按新的 rank 数取自己那一份，
# 训练带着优化器状态继续。第 09 课就是这样把 2 个 rank 的检查点在 3 个 rank 上恢复的。
#
# </details> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: universal-checkpoint-per-parameter --> <!-- claim: universal-info-needed-at-stages-1-2 -->

# %% [markdown]
# ## Q22: an empty ZeRO-3 save (1 point)
#
# After ZeRO-3 training, `torch.save(model.state_dict(), 'model.pt')` on rank 0 writes a file of a few kilobytes,
# and loading it into a fresh model fails with size mismatches. Why?
#
# - A: the save is asynchronous, and the file is written only after the job ends
# - B: ZeRO-3 keeps the weights only in fp32 on the CPU, where the save does not look
# - C: outside forward and backward each rank holds only its shard, so the module's parameters are empty
#   placeholders, and `state_dict()` returns those
# - D: a DeepSpeed bug: upgrading fixes it
#
# Set `Q22` to a letter.

# %% [markdown] lang="zh" en="0cc76e2ac475"
# ## Q22：空的 ZeRO-3 保存（1 分）
#
# ZeRO-3 训练结束后，在 rank 0 上执行 `torch.save(model.state_dict(), 'model.pt')`，写出的文件只有几 KB，
# 把它加载进一个新模型时报出尺寸不匹配。为什么？
#
# - A：保存是异步的，文件要等作业结束后才写入
# - B：ZeRO-3 只在 CPU 上以 fp32 保存权重，而保存时不会去那里找
# - C：在前向和反向之外，每个 rank 只持有自己的分片，所以模块的参数是空的占位张量，`state_dict()` 返回的就是它们
# - D：这是 DeepSpeed 的 bug：升级就能解决
#
# 把 `Q22` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex22_empty_save", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q22 = "C"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex22_empty_save", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q22, "ABCD", "Q22")
assert _letter != drill.letter("Q22", "bug"), \
    "Q22 is not right: this is how ZeRO-3 works in every version, not a bug"
assert _letter != drill.letter("Q22", "async"), \
    "Q22 is not right: torch.save writes the file before it returns"
assert drill.is_right("Q22", _letter), "Q22 is not right: what does each rank hold of a parameter at stage 3, outside forward and backward?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q22", ["zerolab.lesson.drill"], exercise="Q22",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.config.defaults import default_of as _default_of

assert _default_of("zero_optimization.stage3_gather_16bit_weights_on_model_save") is False, \
    "DeepSpeed's default for stage3_gather_16bit_weights_on_model_save is no longer off"
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q22, "Q22"), "ABCD", "Q22") == drill.key("Q22"), "Q22 is not right"
### END HIDDEN TESTS
passed("Q22")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** C. Outside forward and backward a ZeRO-3 rank keeps only its shard; the module's parameters are
# empty placeholders (all but the small ones, of at most `stage3_param_persistence_threshold` elements, 100,000 by
# default, which stay whole), and `state_dict()` saves those. Set `stage3_gather_16bit_weights_on_model_save` to true and
# save with `engine.save_16bit_model(dir)`, which gathers the whole 16-bit model on rank 0 (the flag changes what
# that call writes, not what `state_dict()` returns), or consolidate a checkpoint with `zero_to_fp32`
# (`zerolab ckpt consolidate`). Lesson 09 shows the failure for real.
# <!-- claim: zero3-state-dict-holds-placeholders --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: save-16bit-model-whole-and-gather-flag --> <!-- claim: stage3-small-parameters-stay-whole -->
#
# </details>

# %% [markdown] lang="zh" en="7307b2f72f05"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** C。在前向和反向之外，ZeRO-3 的每个 rank 只保留自己的分片；模块里的参数是空的占位张量（只有元素数不超过 `stage3_param_persistence_threshold`（默认 100,000）的小参数保持完整），`state_dict()` 保存的就是它们。
# 把 `stage3_gather_16bit_weights_on_model_save` 设为 true，并用 `engine.save_16bit_model(dir)` 保存，它会在 rank 0 上收集完整的 16 位模型（这个开关改变的是这次调用写出的内容，而不是 `state_dict()` 的返回值）；
# 或者用 `zero_to_fp32`（`zerolab ckpt consolidate`）合并检查点。第 09 课会真实地演示这个失败。
# <!-- claim: zero3-state-dict-holds-placeholders --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: save-16bit-model-whole-and-gather-flag --> <!-- claim: stage3-small-parameters-stay-whole -->
#
# </details>

# %% [markdown]
# ## Q23: bf16 master weights and moments (1 point)
#
# A config turns on bf16 training with `bf16_master_weights_and_grads` and `bf16_optimizer_states`, ZeRO-2 on 8
# GPUs. Compared with DeepSpeed's default (fp32 master weights and moments), what changes on each GPU?
#
# - A: nothing: the two keys only change how checkpoints are written
# - B: the 16-bit parameters shrink to 1 byte each
# - C: the 12 bytes of optimizer state per parameter (master copy, momentum, variance) become 6, split over the 8
#   GPUs as before
# - D: the 12 bytes become 6, but ZeRO no longer splits them, so each GPU holds all of them
#
# Set `Q23` to a letter.

# %% [markdown] lang="zh" en="7f55a50feadb"
# ## Q23：bf16 的主权重和动量（1 分）
#
# 一个配置打开了 bf16 训练，并设置了 `bf16_master_weights_and_grads` 和 `bf16_optimizer_states`，在 8 张 GPU 上用 ZeRO-2。与 DeepSpeed 的默认设置（fp32 主权重和动量）相比，每张 GPU 上有什么变化？
#
# - A：没有变化：这两个键只改变检查点的写法
# - B：16 位参数缩小到每个 1 字节
# - C：每个参数 12 字节的优化器状态（主权重副本、动量、方差）变成 6 字节，和原来一样切分到 8 张 GPU 上
# - D：12 字节变成 6 字节，但 ZeRO 不再切分它们，所以每张 GPU 都持有全部
#
# 把 `Q23` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex23_bf16_master", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q23 = "C"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex23_bf16_master", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q23, "ABCD", "Q23")
assert _letter != drill.letter("Q23", "checkpoint_only"), \
    "Q23 is not right: the keys change the dtype DeepSpeed keeps the optimizer's tensors in while it trains"
assert drill.is_right("Q23", _letter), \
    "Q23 is not right: which tensors does each key make bf16, and does ZeRO-2 still split them?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q23", ["zerolab.lesson.drill"], exercise="Q23",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q23, "Q23"), "ABCD", "Q23") == drill.key("Q23"), "Q23 is not right"
### END HIDDEN TESTS
passed("Q23")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** C. `bf16_master_weights_and_grads` keeps the master copy (and the gradients the optimizer reads) in
# bf16, `bf16_optimizer_states` keeps Adam's two moments in bf16: 2 + 2 + 2 bytes where the default keeps 4 + 4 + 4,
# and ZeRO partitions them exactly as before. The parameters stay 2 bytes. The price is the precision of small
# updates (lesson 10 measures both). <!-- claim: bf16-master-and-moments-make-k-6 -->
#
# </details>

# %% [markdown] lang="zh" en="c5f3c6dbabd2"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** C。`bf16_master_weights_and_grads` 把主权重副本（以及优化器读取的梯度）保存为 bf16，`bf16_optimizer_states` 把 Adam 的两个动量保存为 bf16：默认是 4 + 4 + 4 字节，现在是 2 + 2 + 2 字节，ZeRO 切分它们的方式与原来完全相同。参数仍是 2 字节。代价是小更新的精度（第 10 课会实测这两点）。 <!-- claim: bf16-master-and-moments-make-k-6 -->
#
# </details>

# %% [markdown]
# ## Q24: Muon's state (1 point)
#
# With DeepSpeed's Muon (optimizer type `"Muon"`), bf16 training and ZeRO-2, what optimizer state does a hidden
# matrix's parameter cost, master weights apart?
#
# - A: one momentum buffer in bf16: 2 bytes
# - B: Adam's two fp32 moments, 8 bytes, as for every other parameter
# - C: nothing: Newton-Schulz needs no state
# - D: an fp32 momentum and an fp32 variance, 8 bytes, plus a copy of the orthogonalized update
#
# Set `Q24` to a letter.

# %% [markdown] lang="zh" en="26edd3a1ee5c"
# ## Q24：Muon 的状态（1 分）
#
# 使用 DeepSpeed 的 Muon（优化器类型 `"Muon"`）、bf16 训练和 ZeRO-2 时，隐藏层矩阵的一个参数要占多少优化器状态（不算主权重）？
#
# - A：一个 bf16 动量缓冲区：2 字节
# - B：Adam 的两个 fp32 动量，8 字节，和其他参数一样
# - C：什么都没有：Newton-Schulz 不需要状态
# - D：一个 fp32 动量和一个 fp32 方差，8 字节，外加一份正交化之后的更新
#
# 把 `Q24` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex24_muon_state", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
Q24 = "A"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex24_muon_state", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice

_letter = choice(Q24, "ABCD", "Q24")
assert _letter != drill.letter("Q24", "nothing"), \
    "Q24 is not right: Muon orthogonalizes a momentum of the gradients, which it keeps between steps"
assert drill.is_right("Q24", _letter), "Q24 is not right: how many buffers does Muon keep, and in which dtype?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("Q24", ["zerolab.lesson.drill"], exercise="Q24",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import drill
from zerolab.lesson.checks import choice, plain

assert choice(plain(Q24, "Q24"), "ABCD", "Q24") == drill.key("Q24"), "Q24 is not right"
### END HIDDEN TESTS
passed("Q24")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** A. Muon keeps one momentum buffer per matrix, in the gradients' dtype (bf16 here), and turns it into
# an orthogonal update each step without storing the result. The parameters Muon does not step (embeddings, the
# head, norms, biases) go to an Adam beside it, with two fp32 moments; both halves keep fp32 master weights. At
# stages 1-2 a matrix that straddles two ranks' partitions keeps its whole momentum on both (lesson 10 measures it).
# <!-- claim: muon-momentum-in-the-gradient-dtype --> <!-- claim: muon-steps-2d-parameters-but-embeddings-and-head --> <!-- claim: muon-straddling-matrix-momentum-on-both-ranks -->
#
# </details>

# %% [markdown] lang="zh" en="ac060acc978d"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** A。Muon 为每个矩阵保存一个动量缓冲区，数据类型与梯度相同（这里是 bf16），每一步把它变成一个正交的更新，但不保存这个结果。Muon 不更新的参数（词嵌入、输出头、归一化层、偏置）交给与它并行的一个 Adam，带有两个 fp32 动量；两半都保存 fp32 主权重。在 stage 1-2，跨在两个 rank 分区之间的矩阵会在两个 rank 上都保存完整的动量（第 10 课会实测）。
# <!-- claim: muon-momentum-in-the-gradient-dtype --> <!-- claim: muon-steps-2d-parameters-but-embeddings-and-head --> <!-- claim: muon-straddling-matrix-momentum-on-both-ranks -->
#
# </details>

# %% [markdown]
# ## Summary
#
# - 16 bytes per parameter: 2 fp16 parameters + 2 fp16 gradients + K = 12 (fp32 master weights, momentum, variance).
# - Per GPU: ZeRO-1 divides the 12 by Nd, ZeRO-2 the 14, ZeRO-3 all 16; DeepSpeed's estimator adds 4 bytes of fp32
#   gradients and prints GiB as "GB".
# - Volume, in the paper's accounting: 2Ψ for DDP, ZeRO-1 and ZeRO-2; 3Ψ for ZeRO-3. DeepSpeed 0.19.8's default
#   ZeRO-1/2 all-reduce the gradient buckets and then all-gather the parameters: 3Ψ, 1.5x DDP. ZeRO-2 and -3 reduce
#   on every micro-step, in buckets.
# - `overlap_comm`: off for stages 0-2, on for stage 3 by default; costs a second bucket buffer, not 4.5x.
# - Offload: the GPU keeps the fp16 parameters (ZeRO-2), the host keeps at least 16 bytes per parameter, and each
#   step moves the gradient and parameter partitions over PCIe; `pin_memory` is on by default.
# - fp16 before Ampere, bf16 from Ampere; batch = micro batch x accumulation x data-parallel replicas.
# - FSDP: FULL_SHARD ≈ ZeRO-3, SHARD_GRAD_OP ≈ ZeRO-2, NO_SHARD ≈ DDP.
# - Activations are not partitioned: each GPU keeps those of its own micro-batch. They grow with the sequence
#   length, faster where attention keeps its s x s scores; full recomputation keeps only each layer's input.
# - A ZeRO checkpoint is one optimizer file per rank, cut for that number of ranks: `zero_to_fp32` consolidates it,
#   `ds_to_universal` + `load_universal` resume it on another number; a ZeRO-3 module's `state_dict()` holds empty
#   placeholders, and `save_16bit_model` with `stage3_gather_16bit_weights_on_model_save` gathers its 16-bit weights. <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: deepspeed-estimators-print-gib-as-gb --> <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero3-communicates-every-micro-step --> <!-- claim: overlap-comm-default-by-stage --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: fsdp-strategies-and-zero-stages --> <!-- claim: zero-does-not-partition-activations --> <!-- claim: fused-attention-keeps-no-scores --> <!-- claim: checkpoint-keeps-only-each-layer-input --> <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: universal-checkpoint-per-parameter --> <!-- claim: zero3-state-dict-holds-placeholders --> <!-- claim: save-16bit-model-whole-and-gather-flag --> <!-- claim: zero12-bucket-buffers-no-4-5x -->

# %% [markdown] lang="zh" en="0842560424b3"
# ## 小结
#
# - 每个参数 16 字节：2 字节 fp16 参数 + 2 字节 fp16 梯度 + K = 12（fp32 主权重、动量、方差）。
# - 每张 GPU：ZeRO-1 把其中 12 字节除以 Nd，ZeRO-2 把 14 字节除以 Nd，ZeRO-3 把全部 16 字节除以 Nd；
#   DeepSpeed 的估算函数多算 4 字节 fp32 梯度，并把 GiB 标成 “GB”。
# - 通信量，按论文的口径：DDP、ZeRO-1 和 ZeRO-2 都是 2Ψ；ZeRO-3 是 3Ψ。DeepSpeed 0.19.8 默认的 ZeRO-1/2
#   先对梯度桶做 all-reduce，再 all-gather 参数：3Ψ，是 DDP 的 1.5 倍。ZeRO-2 和 -3 每个微步都要归约，而且分桶进行。
# - `overlap_comm`：stage 0-2 默认关闭，stage 3 默认开启；代价是多一个桶缓冲区，不是 4.5 倍。
# - 卸载：GPU 上保留 fp16 参数（ZeRO-2），主机上每个参数至少 16 字节，每步要经 PCIe 传输梯度分片和参数分片；
#   `pin_memory` 默认开启。
# - Ampere 之前用 fp16，Ampere 起用 bf16；batch = 微批次 x 累积步数 x 数据并行副本数。
# - FSDP：FULL_SHARD ≈ ZeRO-3，SHARD_GRAD_OP ≈ ZeRO-2，NO_SHARD ≈ DDP。
# - 激活值不切分：每张 GPU 保留自己那个微批次的激活值。它们随序列长度增长，注意力保留 s x s 分数时增长得更快；
#   完全重计算只保留每一层的输入。
# - ZeRO 检查点是每个 rank 一个优化器文件，按保存时的 rank 数切分：`zero_to_fp32` 把它合并，
#   `ds_to_universal` 加 `load_universal` 让它在别的 rank 数上恢复；ZeRO-3 模块的 `state_dict()` 只有空占位张量，
#   开启 `stage3_gather_16bit_weights_on_model_save` 后用 `save_16bit_model` 保存才会收集 16 位权重。 <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: deepspeed-estimators-print-gib-as-gb --> <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero3-communicates-every-micro-step --> <!-- claim: overlap-comm-default-by-stage --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: fsdp-strategies-and-zero-stages --> <!-- claim: zero-does-not-partition-activations --> <!-- claim: fused-attention-keeps-no-scores --> <!-- claim: checkpoint-keeps-only-each-layer-input --> <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: universal-checkpoint-per-parameter --> <!-- claim: zero3-state-dict-holds-placeholders --> <!-- claim: save-16bit-model-whole-and-gather-flag --> <!-- claim: zero12-bucket-buffers-no-4-5x -->

# %% [markdown]
# ## References
#
# - Rajbhandari, Rasley, Ruwase, He: *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC'20,
#   arXiv:1910.02054 (section 3.1 for 2 + 2 + K bytes, section 5 and Figure 1 for the per-GPU figures, section 7 for
#   communication volume).
# - DeepSpeed 0.19.8 source: `deepspeed/runtime/zero/config.py` (stage-dependent `overlap_comm`),
#   `deepspeed/runtime/zero/offload_config.py` (`pin_memory`), `deepspeed/runtime/config.py` (batch arithmetic).
# - Hugging Face Accelerate, FSDP guide: the FSDP sharding strategies and their ZeRO counterparts.
# - Lesson 04's references for the DeepSpeed changes named here (pin_memory default, bucket multiplier, host RAM).

# %% [markdown] lang="zh" en="6407907ce08e"
# ## 参考资料
#
# - Rajbhandari, Rasley, Ruwase, He: *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC'20, arXiv:1910.02054（第 3.1 节：
#   2 + 2 + K 字节；第 5 节和图 1：每张 GPU 的数字；第 7 节：通信量）。
# - DeepSpeed 0.19.8 源码：`deepspeed/runtime/zero/config.py`（随 stage 变化的 `overlap_comm` 默认值）、
#   `deepspeed/runtime/zero/offload_config.py`（`pin_memory`）、`deepspeed/runtime/config.py`（batch 换算）。
# - Hugging Face Accelerate 的 FSDP 指南：FSDP 的各种切分策略及其对应的 ZeRO stage。
# - 本课提到的 DeepSpeed 改动（`pin_memory` 默认值、桶系数、主机内存），参考资料见第 04 课。
