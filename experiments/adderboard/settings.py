"""The AdderBoard search's settings: each a vmapped sweep over seeds or one solo phase of another setting's run, on
the preset adder-146 with the changes it names (experiments/adderboard/study.py trains them and writes the bundle)."""

from __future__ import annotations

from experiments.adderboard.recipes import (
    AT_M4,
    BASE,
    DATA,
    FROM_ARC,
    GAUGED_41,
    HEAD_FREE_41,
    MODEL_32M,
    MODEL_32P,
    MODEL_32S,
    MODEL_33P,
    MODEL_35G,
    MODEL_35GR,
    MODEL_35M,
    MODEL_35P,
    MODEL_35R,
    MODEL_35S,
    MODEL_35U,
    MODEL_36,
    MODEL_36A1,
    MODEL_41A1,
    MODEL_41R,
    MODEL_S3,
    SCALE3_41,
    SHARED,
    SMALL,
    START_36,
    START_41,
    START_62,
    T41,
    TIED_62,
    Derived,
    Setting,
    chain,
    continued,
    curriculum,
    long_stage,
    plain,
    small_batch_stage,
    soft,
    targeted,
)

# 41-start-angle1-b16-cos's recipe after its model: the from-seed screens of the 41's derived models train as it did
B16_COS = ("optim.lr=1e-2", *DATA, "train.batch_size=16", "optim.schedule=cosine", "optim.final_lr_frac=0")

M4 = "preset-41-screened/phase-1/member_004"  # the preset adder-41-screened's screen member that its stage continues
M4_TRAINED = "the preset adder-41-screened's screen, from its seeds"

DERIVED = (
    Derived(GAUGED_41, "the trained 41 (41a1-m7-b17) with its six exact symmetries fixed by pins (gauge.py): the "
            "same logits from 35 parameters", "41a1-m7-b17"),
    Derived(HEAD_FREE_41, "the 35 with the MLP's write to residual dim 2 pinned at 0 as well (gauge.py --head-free): "
            "that write reaches only ln_final's RMS, a positive factor on a position's logits, so every argmax is "
            "the 41's, from 33 parameters", "41a1-m7-b17", head_free=True),
    Derived("41a1-m7-b17-32p", "the 33 with the head's temperature pinned as well (gauge.py --head-free "
            "--temperature: the RMSNorm scale's dim 0 at 7; its dims 0 and 1 against Q's square root and the gate's "
            "and up's rows 0 and 1 scale every logit of a position by one factor), so every argmax is the 41's, "
            "from 32 parameters", "41a1-m7-b17", head_free=True, temperature=True),
    Derived("41a1-b16c-m4-r2-32p", "the small-batch lineage's 41 (41a1-b16c-m4-r2) as 41a1-m7-b17-32p is the first "
            "41's: every argmax its own, from 32 parameters", "41a1-b16c-m4-r2", head_free=True, temperature=True),
    Derived("preset-41-screened-32p", "the 41 of the preset adder-41-screened, trained from its seeds (the setting "
            "preset-41-screened, its last phase), as 41a1-m7-b17-32p is the first 41's: every argmax its own, from 32 "
            "parameters", "preset-41-screened", head_free=True, temperature=True,
            trained="the preset adder-41-screened, from its seeds"),
    Derived("preset-41-m4-35m", "the preset adder-41-screened's screen member 4 (its stage's start, 240k steps) "
            "with its six exact symmetries pinned at its own sizes (gauge.py --at): the same logits from 35 "
            "parameters, to train on in them", M4, trained=M4_TRAINED, at=AT_M4),
    Derived("preset-41-m4-32m", "preset-41-m4-35m with the head's write to dim 2 and its temperature pinned too (at "
            "its own size): every argmax the member's, from 32 parameters, to train on in them", M4, head_free=True,
            temperature=True, trained=M4_TRAINED, at=AT_M4),
)
# united hard pairs: n6's round's (q5@6), then every round's of the chain so far (the rounds on their run's own alone
# rose and fell)
ROUNDS_A = chain("41a1-m7-a", "41a1-m7-n6", range(7, 14), "a round at 90 % from 3e-4 on the hard pairs of 41a1-m7-n6's "
                 "round and of every round of the chain so far", keep=("41a1-m7-q5@6",), share=0.9, lr="3e-4")


# The 32 trained in its own parameters, as 41a1-m7-b's rounds trained the 41: every round's hard pairs 90 % of the
# set, united with the chain's earlier ones. That chain's union held the wrong pairs of many weaker runs (q5 to b16,
# gone); 33p-b18's, the 41's own at four seeds, was narrow and the round fell. Here the union starts from what the
# runs near the 41 decode wrong (NEAR_41: its plain and targeted rounds); two chains, from lr 3e-4 and from 1e-3
NEAR_41 = ("41-plain@18", "35p-b18@19", "33p-b18@20", "32p-t18@21")
ROUNDS_32 = tuple(r for stem, lr, last in (("32p-a", "3e-4", 30), ("32p-b", "1e-3", 36))
                  for r in chain(stem, "41a1-m7-b17-32p", range(18, last + 1),
                                 f"a round as 41a1-m7-b's from {lr} in its 32 parameters, the hard pairs of the runs "
                                 "near the 41 (NEAR_41) and of every round of the chain so far 90 % of the set",
                                 keep=NEAR_41, share=0.9, lr=lr, model=MODEL_32P))
G20 = ("41a1-m7-b17@18", "35g-s18@19", "35g-s19@20")  # the hard sources of 35g-s20's round, and of 35f-s19's
F19 = ("41a1-m7-b17@18", "35f-s18@19")

SEARCH = (
    Setting("sweep-torch", "adder-146 (Taghadouini's 146 parameters) at two learning rates", BASE, ("lr=5e-3,1e-2",)),
    Setting("146-phase2-m5", "sweep-torch's best member (lr 1e-2, seed 1) continued 33k steps: a second phase",
            ("model.init=torch", "optim.lr=1e-2"), steps=33_000, init_from="sweep-torch/member_005", seed=1),
    Setting("C-62", "the 62-parameter entry's architecture: arc embedding, K = V, O = Q^T, one head, SwiGLU 2, Adam "
            "without weight decay", BASE + TIED_62, ("lr=1e-2,2e-2",), 15_000),
    Setting("preset-146-phases", "the preset adder-146-phases from its seed: sweep-torch's member 5 and a second phase "
            "with a cosine decay as one command (a solo run is not the vmapped member bit for bit: phase 1 differs)",
            (), phased="adder-146-phases"),
    Setting("146-phase2-constant", "the preset's phase 1, then 33k steps at a constant lr 1e-2 (146-phase2-m5's phase "
            "2)", ("model.init=torch", "optim.lr=1e-2"), steps=33_000, init_from="preset-146-phases/phase-1", seed=1),
    Setting("146-phase2-cosine", "the preset's phase 1, then 33k steps decaying lr 1e-2 to 0 (cosine): the preset's "
            "phase 2", ("model.init=torch", "optim.lr=1e-2", "optim.schedule=cosine"), steps=33_000,
            init_from="preset-146-phases/phase-1", seed=1),
    Setting("D-62-cur3", "C-62 on 3-digit operands (zero-padded to 10): the first phase of the 62-parameter entry's "
            "3 -> 6 -> 10-digit curriculum", BASE + TIED_62 + ("task.train_digits=3",), ("lr=1e-2,2e-2",), 10_000),
    Setting("E-62-cur6", "D-62-cur3's lowest-loss member (lr 1e-2, seed 2) on 6-digit operands: the curriculum's "
            "second phase", BASE + TIED_62 + ("optim.lr=1e-2", "task.train_digits=6"), steps=10_000,
            init_from="D-62-cur3/member_002", seed=2),
    Setting("F-62-cur10", "E-62-cur6 on 10-digit operands: the curriculum's last phase",
            BASE + TIED_62 + ("optim.lr=1e-2",), steps=25_000, init_from="E-62-cur6", seed=2),
    Setting("preset-62-phases", "the preset adder-62-phases from its seed: the 62-parameter entry's four stages (V = "
            "K, O = Q^T, arc embedding from its open arc, N(0, 0.02); 200k cosine steps 1e-2 -> 1e-3, 50k at 1e-3 and "
            "30k at 3e-4 at batch 256, 50k cosine 1e-3 -> 0 without weight decay)", (), phased="adder-62-phases"),
    Setting("preset-62-phases-s2", "preset-62-phases at seed 2", (), phased="adder-62-phases", seed=2),
    Setting("62-start-seeds", "adder-62-phases' start (V = K, O = Q^T, arc embedding from the open arc, N(0, 0.02)) "
            "at 4 seeds, 30k steps at a constant lr 1e-2 (its phase 1's first 30k of 200k are within 5 % of it): how "
            "often the recipe's start leaves the plateau near 2.27 nats", START_62, steps=30_000),
    Setting("41-start-seeds", "62-start-seeds with the later sub-50 ties, the board's 36's (V = Q, K = Q with every "
            "plane turned, O = Q^T, the RMSNorms one scale, the QK-norms another): 41 parameters, 4 seeds, 30k steps "
            "at lr 1e-2", START_41,
            steps=30_000),
    Setting("36-start-angle", "41-start-seeds' start at 36 parameters (down = up turned, then transposed), every "
            "turned tie from the angle 0.1 (the entry's), 4 seeds at lr 1e-2 and 2e-2, 30k steps", START_36,
            ("lr=1e-2,2e-2",), 30_000),
    Setting("41-start-scale3", "41-start-seeds from every initial parameter times 3 (model.init_scale; the arc from "
            "the same open arc, amplitude 7.5): sharper attention from the start (QK-norm scales 3)", SCALE3_41,
            steps=30_000),
    Setting("52-start-seeds", "62-start-seeds with the RMSNorms one scale and the QK-norms another (SHARED): 52 "
            "parameters, the 62's ties otherwise, 8 seeds, 30k steps at lr 1e-2", (*START_62, SHARED), steps=30_000,
            seeds=8),
    Setting("preset-52-phases", "the preset adder-52-phases from its seed: adder-62-phases with the norms shared "
            "(52 parameters) at seed 4, 52-start-seeds' member that left the plateau first", (),
            phased="adder-52-phases"),
    Setting("41-start-angle1", "41-start-seeds with K = Q turned from the angle 1 (model.tie_angle; 0 is K = Q at "
            "the start), 8 seeds, 30k steps at lr 1e-2: is it the tie's start that holds the 41 on the plateau?",
            (*START_41, "model.tie_angle=1.0"), steps=30_000, seeds=8),
    Setting("41-start-kscale", "41-start-seeds with K = a Q (scale, the 58's tie) in place of K = Q turned: 41 "
            "parameters, 8 seeds, 30k steps at lr 1e-2", (*SMALL, T41.replace("rot(", "scale("), SHARED, *FROM_ARC,
                                                           "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("41-start-scale3-4to11", "41-start-scale3 at the next 8 seeds (4 to 11)", (*SCALE3_41, "train.seed=4"),
            steps=30_000, seeds=8),
    Setting("36-start-angle1", "36-start-angle's model with every turned tie (K = Q turned, down = up turned then "
            "transposed) from the angle 1, 8 seeds, 30k steps at lr 1e-2: does 41-start-angle1's lever move the 36?",
            (*MODEL_36A1, "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("41r-start-seeds", "the board's 41 as its entry builds it: Q = K turned in its first plane alone (RoPE's "
            "fastest) from -0.5, V = K, O = K^T, the norms shared (41-start-seeds turns every plane of K, from 0), 8 "
            "seeds, 30k steps at lr 1e-2", (*MODEL_41R, "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("41r-start-gf", "41r-start-seeds with grokfast EMA (0.98, 2) from the first step, as its entry's "
            "'Curriculum + Grokfast-EMA + adaptive weight decay' (its submission's metadata; less the curriculum, the "
            "adaptive decay and its cosine lr; every setting here clips the gradient's norm at 1 as it does, though "
            "before grokfast, it after), 8 seeds, 30k steps at lr 1e-2",
            (*MODEL_41R, "optim.lr=1e-2", "optim.grokfast=ema", "optim.alpha=0.98", "optim.lamb=2", *DATA),
            steps=30_000, seeds=8),
    Setting("35r-start-seeds", "41r-start-seeds with down = up^T (its sweep's downUpT, no angle): 35 parameters, "
            "below the board's 36, 8 seeds, 30k steps at lr 1e-2", (*MODEL_35R, "optim.lr=1e-2", *DATA),
            steps=30_000, seeds=8),
    *continued(MODEL_41R, "41r-start-seeds/member_006", 6, "41r-m6",
               "41r-start-seeds' lowest-loss member (seed 6, train loss 0.95 at 30k)"),
    *continued(MODEL_41A1, "41-start-angle1/member_007", 7, "41a1-m7",
               "41-start-angle1's lowest-loss member (seed 7, train loss 0.90 at 30k)"),
    long_stage("41a1-m7-long", "41a1-m7-nowd (exact match 0.309, still gaining) given its no-decay stage again, "
               "twice as long", "41a1-m7-nowd"),
    long_stage("41a1-m7-long2", "41a1-m7-long (still gaining) given the same stage again", "41a1-m7-long"),
    long_stage("41a1-m7-long3", "41a1-m7-long2 given the same stage again", "41a1-m7-long2"),
    long_stage("41a1-m7-long3-3e-4", "41a1-m7-long3's stage from a lower peak (each 1e-3 restart first lost held-out "
               "exact match before it gained)", "41a1-m7-long2", lr="3e-4"),
    long_stage("41a1-m7-long4-3e-4", "41a1-m7-long3 continued from the lower peak", "41a1-m7-long3", lr="3e-4"),
    long_stage("41a1-m7-long5", "41a1-m7-long4-3e-4 given the 1e-3 stage again (it ended above the 3e-4 one from the "
               "same start)", "41a1-m7-long4-3e-4"),
    *chain("41a1-m7-t", "41a1-m7-long5", range(1, 6), "a round of targeted fine-tuning, its hard pairs half the set"),
    *chain("41a1-m7-q", "41a1-m7-t4", range(5, 7), "a round with its hard pairs at 75 % of the set", share=0.75),
    *chain("41a1-m7-n", "41a1-m7-q5", range(6, 8), "a round with its hard pairs at 90 % of the set", share=0.9),
    *chain("41a1-m7-l", "41a1-m7-q5", range(6, 8), "a round with its hard pairs at 90 % of the set from a lower "
           "peak (41a1-m7-q6 gained nothing from its 1e-3 restart)", share=0.9, lr="3e-4"),
    *ROUNDS_A,
    *chain("41a1-m7-p", "41a1-m7-n6", range(7, 11), "a round as 41a1-m7-a's from 1e-4", keep=("41a1-m7-q5@6",),
           share=0.9, lr="1e-4"),
    *chain("41a1-m7-b", "41a1-m7-a10", range(11, 18), "a round as 41a1-m7-a's from 1e-3 (the peak of the rounds that "
           "gained most, before they stopped gaining)", keep=ROUNDS_A[3].hard, share=0.9),  # a10's
    # below 36 from the 41 (41a1-m7-b17, restored from its submission by restore.py): soft-tie rounds with the gate
    # pulled toward up ever harder, then the tie made (35 parameters); and the tie made at once, as a control
    soft("35g-s18", "41a1-m7-b17 given a round with its hard pairs half the set", "41a1-m7-b17",
         ("41a1-m7-b17@18",), 1e-2),
    soft("35g-s19", "35g-s18 given the round again", "35g-s18", ("41a1-m7-b17@18", "35g-s18@19"), 1e-1),
    soft("35g-s20", "35g-s19 given the round again", "35g-s19", ("41a1-m7-b17@18", "35g-s18@19", "35g-s19@20"), 1.0),
    targeted("35g-t21", "35g-s20 with its gate tied to up (35 parameters: the gate dropped), given the round",
             "35g-s20", ("41a1-m7-b17@18", "35g-s18@19", "35g-s19@20", "35g-s20@21"), model=MODEL_35G),
    soft("35f-s18", "41a1-m7-b17 given a round with its hard pairs half the set (35g's ramp from its second weight)",
         "41a1-m7-b17", ("41a1-m7-b17@18",), 1e-1),
    soft("35f-s19", "35f-s18 given the round again", "35f-s18", ("41a1-m7-b17@18", "35f-s18@19"), 1.0),
    targeted("35f-t20", "35f-s19 with its gate tied to up (35 parameters: the gate dropped), given the round",
             "35f-s19", ("41a1-m7-b17@18", "35f-s18@19", "35f-s19@20"), model=MODEL_35G),
    # tied at a gap of 0.17 (weight 1), both fell to the plateau at once (results.md). Pulled harder before a tie: the
    # gap closed only as the sums were lost (results.md's soft-tie table), so no tied round followed
    soft("35g-s21", "35g-s20 given the round again", "35g-s20", (*G20, "35g-s20@21"), 10.0),
    soft("35g-s22", "35g-s21 given the round again", "35g-s21", (*G20, "35g-s20@21", "35g-s21@22"), 100.0),
    soft("35g-s23", "35g-s22 given the round again", "35g-s22", (*G20, "35g-s20@21", "35g-s21@22", "35g-s22@23"),
         1000.0),
    soft("35f-s20", "35f-s19 given the round again", "35f-s19", (*F19, "35f-s19@20"), 100.0),
    Setting("35g-start-angle1", "41-start-angle1 (the screen of 41a1-m7's seed) at 35 parameters, SwiGLU's gate = its "
            "up (MODEL_35G), 8 seeds, 30k steps at lr 1e-2: does the 35 leave the plateau from a seed?",
            (*MODEL_35G, "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("35g-start-angle1-8to15", "35g-start-angle1 at the next 8 seeds (8 to 15)",
            (*MODEL_35G, "optim.lr=1e-2", *DATA, "train.seed=8"), steps=30_000, seeds=8),
    Setting("35g-start-angle1-16to23", "35g-start-angle1 at 8 seeds more (16 to 23): the 35 whose screen ended lowest",
            (*MODEL_35G, "optim.lr=1e-2", *DATA, "train.seed=16"), steps=30_000, seeds=8),
    targeted("35h-t18", "41a1-m7-b17 with its gate tied to up at once (35 parameters: the gate dropped), given the "
             "round: 35g's control", "41a1-m7-b17", ("41a1-m7-b17@18",), model=MODEL_35G),
    Setting("35u-start-angle1", "41-start-angle1 (the screen of 41a1-m7's seed) at 35 parameters, a ReLU MLP of "
            "width 2 in place of SwiGLU's (MODEL_35U: no gate), 8 seeds, 30k steps at lr 1e-2: does a 35 without the "
            "gate leave the plateau from a seed?", (*MODEL_35U, "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("35gr-start-seeds", "41r-start-seeds (the board's 41 tie: two of its 8 members ended below a training "
            "loss of 1, one of 41-start-angle1's) at 35 parameters, SwiGLU's gate = its up as 35g-start-angle1 (the "
            "35 that ended lowest), 8 seeds, 30k steps at lr 1e-2", (*MODEL_35GR, "optim.lr=1e-2", *DATA),
            steps=30_000, seeds=8),
    targeted("35p-r18", f"{GAUGED_41} (the trained 41 as the 35 with its symmetries pinned, gauge.py) given a "
             "round at lr 1e-4 with 41a1-m7-b17's hard pairs half the set", GAUGED_41, ("41a1-m7-b17@18",),
             lr="1e-4", model=MODEL_35P),
    targeted("35p-b18", f"{GAUGED_41} given a round at lr 1e-3 (41a1-m7-b's) with 41a1-m7-b17's hard pairs half "
             "the set", GAUGED_41, ("41a1-m7-b17@18",), model=MODEL_35P),
    targeted("33p-b18", f"{HEAD_FREE_41} (the trained 41 as the 33, gauge.py --head-free) given a round as "
             "41a1-m7-b's (lr 1e-3, the hard pairs 90 % of the set, united over sources: here the 41's own wrong pairs "
             "at four seeds, its earlier rounds' runs being gone)", HEAD_FREE_41,
             tuple(f"{HEAD_FREE_41}@{k}" for k in range(18, 22)), share=0.9, model=MODEL_33P),
    plain("32p-plain", "41a1-m7-b17-32p (the trained 41 as the 32, gauge.py --head-free --temperature)", MODEL_32P,
          "41a1-m7-b17-32p"),
    plain("41-plain", "41a1-m7-b17 itself (32p-plain's control: the 41's own parameters)", MODEL_41A1,
          "41a1-m7-b17"),
    plain("35p-plain", "41a1-m7-b17-35p (the trained 41 as the 35, its logits the 41's)", MODEL_35P,
          "41a1-m7-b17-35p"),
    targeted("32p-t18", "41a1-m7-b17-32p given a round at lr 1e-4 with the 41's wrong pairs at four seeds a tenth of "
             "the set", "41a1-m7-b17-32p", tuple(f"{HEAD_FREE_41}@{k}" for k in range(18, 22)), share=0.1,
             lr="1e-4", model=MODEL_32P),
    *ROUNDS_32,
    Setting("41-start-angle1-8to15", "41-start-angle1 at the next 8 seeds (8 to 15): its seed 7 made the best sub-52 "
            "run, and the board's entry searched 50 seeds", (*START_41, "model.tie_angle=1.0", "train.seed=8"),
            steps=30_000, seeds=8),
    Setting("41a1-start-mixed", "41-start-angle1 on mixed lengths (task.mixed_lengths: half the training operands a "
            "block of random width at a random place, addition-10's data; the board's 41 drew random lengths), 8 "
            "seeds, 30k steps at lr 1e-2", (*START_41, "model.tie_angle=1.0", "task.mixed_lengths=true"),
            steps=30_000, seeds=8),
    Setting("41r-start-mixed", "41r-start-seeds (the board's 41 tie) on mixed lengths, as 41a1-start-mixed",
            (*MODEL_41R, "optim.lr=1e-2", *DATA, "task.mixed_lengths=true"), steps=30_000, seeds=8),
    Setting("41-start-angle1-b16", "41-start-angle1 at batch 16 for 240k steps: the same 3.84M training rows per "
            "seed in 8 times the updates (a step's time on a CPU grows with its batch, so about the same wall): do "
            "smaller batches take the 41's start further on the same samples?",
            (*START_41, "model.tie_angle=1.0", "train.batch_size=16"), steps=240_000, seeds=8),
    Setting("41-start-angle1-b16-cos", "41-start-angle1-b16 with its lr decayed, cosine from 1e-2 to 0 over the "
            "240k steps: were its flat, noisy late losses the constant lr's noise at batch 16?",
            (*START_41, "model.tie_angle=1.0", "train.batch_size=16", "optim.schedule=cosine",
             "optim.final_lr_frac=0"), steps=240_000, seeds=8),
    Setting("32s-start-angle1-b16-cos", "41-start-angle1-b16-cos (8 seeds, 240k cosine steps from 1e-2 at batch 16) "
            "with the 32's pins from the start, at the start's own scale (gauge.start_pins: the arc's amplitude 2.5, "
            "the norm scale's dims 2 and 0 at 1, up's row 2 at 0.02, the other free entries the 41's own draws): "
            "does the 32 in its own parameters leave the plateau from a seed as the 41 did?",
            (*MODEL_32S, *B16_COS), steps=240_000, seeds=8),
    Setting("35s-start-angle1-b16-cos", "32s-start-angle1-b16-cos with the six exact pins alone (35 parameters, "
            "gauge.start_pins without the head-free and temperature pins): the 32's start fixes the head's scale in "
            "dim 0 (the arc's amplitude times the norm scale's dim 0) at 2.5, under a hundredth of the trained 41s' "
            "(their submission files), which caps how far a middle digit's logit can lead; with it free, does the 35 "
            "leave the plateau from a seed as the 41 did?",
            (*MODEL_35S, *B16_COS), steps=240_000, seeds=8),
    Setting("32p-start-angle1-b16-cos", "32s-start-angle1-b16-cos with the 32's pins at the trained 41's values "
            "(gauge.py's: the amplitude 40, the scale's dims 2 and 0 at 50 and 7, up's row 2 at 10) from the start, "
            "4 seeds: the head's scale in dim 0 at 280 (40 times 7), where gauge.py writes the trained 41, fixed from "
            "step 0: does the 32 leave the plateau when its head starts as sharp as the trained 41's?",
            (*MODEL_32P, *B16_COS), steps=240_000, seeds=4),
    Setting("41a1-cur3", "41-start-angle1 on 3-digit operands (task.train_digits=3, zero-padded; 500k of the 1M "
            "pairs): the first phase of the board's entries' 3 -> 6 -> 10-digit curriculum, 8 seeds, 10k steps at lr "
            "1e-2", (*START_41, "model.tie_angle=1.0", "task.train_digits=3", "task.n_train=500000"), steps=10_000,
            seeds=8),
    *(c for k in range(8) for c in curriculum(k)),
    *(small_batch_stage(k) for k in (4, 1, 5)),
    Setting("preset-41-phases", "the preset adder-41-phases from its seed: 41-start-angle1-b16-cos's recipe for seed "
            "4 alone, then 41a1-b16c-m4-long's stage", (), phased="adder-41-phases"),
    *(Setting(f"41-lone-s{k}", f"adder-41-phases' first phase alone at seed {k} (the preset adder-41-screen): which "
              "seeds leave the plateau on their own, not as members of 41-start-angle1-b16-cos?", (),
              phased="adder-41-screen", seed=k) for k in range(1, 9)),
    Setting("preset-41-rounds", "the preset adder-41-rounds from its seed (preset-41-phases, then 41a1-b16c-m4-r1 and "
            "-r2 as phases): do two rounds take a lone path to 0.99?", (), phased="adder-41-rounds"),
    Setting("preset-41-screened", "the preset adder-41-screened from its seeds: 41-start-angle1-b16-cos as its "
            "screen, the stage from its member with the lowest training loss, one round (41a1-b16c-m4-r1's): the "
            "qualifying 41's path as one preset, under 60 minutes?", (), phased="adder-41-screened"),
    *(r for n, model in ((35, MODEL_35M), (32, MODEL_32M)) for r in (
        small_batch_stage(4, f"{n}m-m4-long", f"preset-41-m4-{n}m", f"preset-41-m4-{n}m (the preset's screen member "
                          f"4 in {n} parameters) alone, as the preset's stage", model),
        *chain(f"{n}m-m4-r", f"{n}m-m4-long", range(1, 2), "a round as the preset's (41a1-b16c-m4-r1's) in its "
               f"{n} parameters", keep=(), share=0.9, model=model))),
    small_batch_stage(4, "35m-m4-slow", "preset-41-m4-35m", "preset-41-m4-35m alone, as the preset's stage from a "
                      "third of its lr (is 35m-m4-long's lag behind the 41 a step too large?)", MODEL_35M, "3e-4"),
    Setting("preset-41-rounds-s1", "the preset adder-41-rounds at seed 1 (41-lone-s1, 41a1-b16c-m4-long's stage, then "
            "41a1-b16c-m4-r1 and -r2 as phases): do two rounds take the other lone seed's path to 0.99?", (),
            phased="adder-41-rounds", seed=1),
    *chain("41a1-b16c-m5-r", "41a1-b16c-m5-long", range(1, 3), "a round as 41a1-b16c-m4-r's: do the rounds lift a run "
           "from the level where the other stages stopped?", keep=(), share=0.9),
    *chain("41a1-b16c-m4-r", "41a1-b16c-m4-long", range(1, 3), "a round at 90 % from 1e-3 (41a1-m7-b's), its hard "
           "pairs united with the chain's earlier ones", keep=(), share=0.9),
    Setting("41a1-m7-gf", "41a1-m7-nowd continued 80k steps with grokfast EMA (0.98, 2), cosine from lr 1e-3 to 1e-4: "
            "the 58's second phase (weight decay 0.01 and batch 128 again)",
            (*MODEL_41A1, *DATA, "optim.lr=1e-3", "optim.grokfast=ema", "optim.alpha=0.98", "optim.lamb=2",
             "optim.schedule=cosine", "optim.final_lr_frac=0.1"), steps=80_000, init_from="41a1-m7-nowd", seed=7),
    *continued(MODEL_S3, "41-start-scale3/member_000", 0, "41s3-m0",
               "41-start-scale3's lowest-loss member (seed 0, train loss 1.27 at 30k)"),
    *continued(MODEL_36, "36-start-angle/member_003", 3, "36-m3",
               "36-start-angle's lowest-loss member (lr 1e-2, seed 3, train loss 1.65 at 30k)"),
    Setting("preset-58-phases", "the preset adder-58-phases from its seed: the board's sub-60 entries' recipe (K = "
            "a Q, O = Q^T, gate = a up, arc embedding; 290k cosine steps from lr 1e-2 to 1e-3, then 80k with grokfast "
            "from 1e-3 to 1e-4)", (), phased="adder-58-phases"),
)


def needs(names, present=frozenset()) -> tuple[str, ...]:
    """`names` and every setting or derived folder they start from (init_from, a derived folder's source) or draw
    hard pairs from, transitively: what training them from their seeds takes, in the search's order (a setting
    after every one it needs; derived folders, which train nothing, last). A name in `present` (its folder is
    there already: trained, restored from its submission, or left unfinished by a stopped study, which resumes it) is
    kept but needs nothing more: whatever it needs had finished before it started."""
    settings = {s.name: s for s in SEARCH} | {d.name: d for d in DERIVED}
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        s = settings[name]
        if name in present:
            continue
        if isinstance(s, Derived):
            todo.append(s.source.partition("/")[0])
        else:
            todo += [h.partition("@")[0] for h in s.hard] + ([s.init_from.partition("/")[0]] if s.init_from else [])
    return tuple(n for n in settings if n in seen)
