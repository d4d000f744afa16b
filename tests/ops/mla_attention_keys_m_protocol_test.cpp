// A host model of the barrier protocol of the keys-as-M mla_attention kernel (design note of
// src/ops/cuda/mla_attention_keys_m.cu), one std::thread per warp: 4 producer warps and 8
// consumer warps (two warpgroups owning alternate tiles), mbarriers with arrival counts,
// transaction bytes and phase parity as PTX defines them (try_wait.parity P succeeds once the
// phase of parity P has completed), named barriers with their counts (in warps), bar.red.or, and
// a copy engine thread that lands the bulk copies late and in random order. The loops, the tile
// counter ti (over row tiles), the stage index and the parities are transcribed from the kernel.
// Checked: no deadlock (a watchdog); every consumer warp reads exactly the tile it expects, every
// producer warp's quarter of it landed; no stage is rewritten (copy or fill) while a consumer
// warp may read it (from its `full` wait to its `empty` arrival); P^T is rewritten only when no
// PV of the warpgroup is still in flight; the column maxima and row sums are read as the four
// warps wrote them for that tile; and the merge exchange (the first two stages' bytes) is used
// only while no copy can land there and no warp reads a tile there, for random row-tile lists
// (0 .. 9 tiles each). The barriers where the roles meet check that no warp arrives twice
// before one completes: consumers past a row tile without KV tiles could arrive twice at the
// row-tile barrier, as the kernel allowed until the twentieth session, before the producers'
// acknowledgement (row tile ack) was added (a planted bug without it). The wide instantiation (64 rows per CTA) in the same model with its own
// protocol: both warpgroups read every tile (`empty` counts 8 arrivals), one P^T of 64 rows in
// two buffers by tile parity behind a P barrier of all 8 warps, with the rescale factors beside
// it; no exchange, m and l of all rows through shared memory after the merge barrier. Checked
// there too: no buffer of P^T or of the factors is rewritten while a PV or a reader of either
// warpgroup may still use it, and m / l are read as both warpgroups wrote them for the row tile.
// With its o boxes (staged in the stages at each row tile's end) the wide form runs the row-tile
// and ack barriers too: the model checks that no copy lands and no producer writes there while o
// is staged (a planted bug without the barrier).
// The 32-row form's split partials staged as boxes (stage_partials) lie past the exchange, in
// stages 1-3: its writer warps stage them after the second merge barrier and their copier waits
// for the copies' reads before the row-tile barrier; the model checks that no copy lands and no
// producer writes there meanwhile (a planted bug stages them after the barrier).
// With the lead (a CTA that walks the batch, producer_lead) there is no row-tile barrier: row tile
// k's boxes lie in the stages of tiles ti_end + 2 + c, handed over to the producers (an mbarrier,
// acknowledged), and Q is reloaded once every consumer warp's last QK released it. Checked: no
// copy lands and no producer writes where boxes are staged, no Q is loaded while a warp may still
// read the one before (every QK reads its own row tile's Q), and no handover completes twice
// before every producer warp waited for the one before (four planted bugs).
// The bf16-cache kernel (src/ops/cuda/mla_attention_keys_m_bf16.cu) runs the wide protocol with
// two stages (its 32 rows split 16 / 16 in QK change no barrier): the same model with 2 stages.
// The planned 64-row bf16 kernel: two stages and one P^T buffer, made safe by a vote over all 8
// warps (one_pt_buffer).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kMaxStages = 4, kProducers = 4, kConsumers = 8;
// Named barriers as the kernel numbers them.
constexpr int kBarQ = 1, kBarMax = 2, kBarP = 4, kBarMerge = 6, kBarRowTile = 7, kBarVote = 8, kBarRowTileAck = 10;

struct MBar {
  int expected = 0, pending = 0;
  long tx = 0;
  unsigned phase = 0;  // completed phases
};

// Planted bugs (0: the kernel).
enum Bug {
  kNone = 0,
  kEmptyParity = 1,     // the producer waits on `empty` without the ^ 1
  kEarlyRelease = 2,    // a consumer warp releases its stage right after `full`, before reading it
  kNoRowTileSync = 3,   // the producers fill the next row tile's stages without the row-tile barrier
  kPtBeforeVote = 4,    // P^T written before the vote barrier (a sibling warp's PV may be in flight)
  kNoMergeBarrier = 5,  // the exchange written without the first merge barrier
  kWideOneBuffer = 6,   // wide: P^T in one buffer (the other warpgroup's PV of the tile before may read it)
  kWideEmpty4 = 7,      // wide: `empty` counts 4 arrivals (the stage freed when one warpgroup is done)
  kNoRowTileAck = 8,    // the consumers arrive at the next row-tile boundary without the producers' ack
  kOneBufferWgVote = 9, // one P^T buffer with the vote per warpgroup (the other's PV may still read it)
  kWideBoxesNoRowTileSync = 10,  // wide o boxes: the producers fill the next row tile's stages without the row-tile barrier
  kPartialsAfterRowTile = 11,  // the 32-row form's staged partials written after the writers arrived at the row-tile barrier
  kLeadNoHandoverWait = 12,  // the lead: the producers never wait for the boxes' handover
  kLeadBoxesFirstStages = 13,  // the lead: the boxes in the stages of tiles ti_end + c (the next row tile's first two)
  kLeadEarlyQRelease = 14,  // the lead: Q released after a row tile's first QK, not its last
  kLeadNoAck = 15,  // the lead: the consumers hand over without waiting for the producers' acknowledgement
};

struct Sim {
  std::mutex mu;
  std::condition_variable cv;
  bool failed = false;
  std::string why;
  int stages = kMaxStages;  // the ring's stages: 4 (fp8 kernel), 2 (the bf16 kernel)
  // The planned 64-row bf16 kernel (mla_attention_keys_m_bf16_wide_layout.h): one P^T buffer, and
  // the vote over all 8 warps, which each passes only after its QK of the tile retired its PV of
  // the tile before: past the vote no PV reads P^T any more.
  bool one_pt_buffer = false;
  // The wide fp8 kernel's o boxes (kOBoxes): each row tile's o is staged in the first 64 KB of the
  // stages (stages 0 and 1, as the merge exchange) and copied out, and the producers wait at the
  // row-tile barrier, as the 32-row form's, before they fill the next row tile's stages.
  bool wide_boxes = false;
  // The 32-row form's split partials staged past the exchange (stages 1-3) by its writer warps.
  bool staged_partials = false;
  int partial_users = 0;
  // The lead (wide_boxes too): Q's buffer (the row tile whose Q it holds, its readers), the stages
  // holding staged boxes (warps staging there), each producer warp's waited handovers.
  bool lead = false;
  MBar qfull, qempty, handover, handover_ack;
  long q_tag = -1;
  int q_readers = 0, boxed[kMaxStages] = {};
  unsigned handovers_waited[kProducers] = {};
  // A consumer warpgroup held up at every step of every tile (-1: none). The races between the
  // warpgroups need one to lag the other; random short pauses give that only by luck, and on a
  // loaded machine (the full matrix in 12 shards beside it) thirty seeds once all missed it.
  int slow_wg = -1;
  MBar full[kMaxStages], empty[kMaxStages];
  int nb_arrived[16] = {}, nb_gen[16] = {};
  int nb_last_gen[16][16];  // the generation of each warp's last arrival (warps 0-7 consumers, 8-11 producers)
  bool nb_or[16] = {}, nb_or_result[16] = {};
  // Contents: which tile each producer warp's quarter of a stage holds; who reads a stage.
  long piece[kMaxStages][kProducers];
  int stage_readers[kMaxStages] = {};
  int copies_pending[kMaxStages] = {};
  int exchange_users = 0;
  // Per warpgroup: PV wgmmas in flight (P^T readers); the tag each warp last wrote into the
  // maxima / sums exchange.
  int pv_in_flight[2] = {};
  // The wide instantiation: PV wgmmas in flight per P^T buffer (both warpgroups'), readers of
  // each buffer's rescale factors, and m / l: the row tile each warpgroup last wrote, readers.
  int pv_in_flight_buf[2] = {}, alpha_readers[2] = {}, ml_readers = 0;
  long ml_tag[2] = {-1, -1};
  long colmax_tag[2][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};
  struct Copy {
    int st, pw;
    long tile;
    long bytes;
  };
  std::deque<Copy> dma;
  bool dma_stop = false;

  Sim() {
    for (auto& s : piece)
      for (long& x : s) x = -1;
    for (auto& b : nb_last_gen)
      for (int& g : b) g = -1;
  }
  void fail_locked(const std::string& w) {
    if (!failed) why = w;
    failed = true;
    cv.notify_all();
  }
  void init_bar(MBar& b, int count) { b.expected = b.pending = count; }
  void maybe_complete(MBar& b) {  // mu held
    if (b.pending == 0 && b.tx == 0) {
      ++b.phase;
      b.pending = b.expected;
      cv.notify_all();
    }
  }
  void arrive(MBar& b) {
    std::lock_guard<std::mutex> g(mu);
    --b.pending;
    maybe_complete(b);
  }
  void arrive_expect_tx(MBar& b, long bytes) {
    std::lock_guard<std::mutex> g(mu);
    b.tx += bytes;
    --b.pending;
    maybe_complete(b);
  }
  void wait(MBar& b, unsigned parity) {
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [&] { return failed || (b.phase & 1u) != parity; });
  }
  // bar.sync / bar.red.or (the result: whether any participant passed true) / bar.arrive.
  // `who` (a warp, or -1): a warp must not arrive twice at one barrier before it completes (the
  // second arrival would count towards the same completion).
  bool named(int id, int warps, bool vote = false, bool wait = true, int who = -1) {
    std::unique_lock<std::mutex> g(mu);
    const int gen = nb_gen[id];
    if (who >= 0) {
      if (nb_last_gen[id][who] == gen)
        fail_locked("warp " + std::to_string(who) + " arrives twice at barrier " + std::to_string(id) + " before it completes");
      nb_last_gen[id][who] = gen;
    }
    nb_or[id] = nb_or[id] || vote;
    if (++nb_arrived[id] == warps) {
      nb_arrived[id] = 0;
      nb_or_result[id] = nb_or[id];
      nb_or[id] = false;
      ++nb_gen[id];
      cv.notify_all();
      return nb_or_result[id];
    }
    if (!wait) return false;
    cv.wait(g, [&] { return failed || nb_gen[id] != gen; });
    return nb_or_result[id];
  }
  void pause(std::mt19937_64& rng) { std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30)); }
  // A warp held up for a while (1-2 ms: longer than the other role's whole row tile in this model).
  void long_pause(std::mt19937_64& rng) { std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 1000)); }
  // A consumer warp of warpgroup wg between two steps.
  void pause_wg(std::mt19937_64& rng, int wg) {
    if (wg == slow_wg) {
      long_pause(rng);
    } else {
      pause(rng);
    }
  }
};

void producer_warp(Sim& s, int pw, const std::vector<int>& ntiles_of, int bug, bool wide, uint64_t seed) {
  std::mt19937_64 rng(seed);
  unsigned ti = 0, q_loads = 0;
  bool first = true, pending = false;  // (the lead: the row tile before's boxes not yet handed over)
  const auto wait_handover = [&] {
    s.long_pause(rng);  // (late at the handover: what a second completion before it needs to show)
    if (bug != kLeadNoHandoverWait) s.wait(s.handover, s.handovers_waited[pw] & 1);
    {
      std::lock_guard<std::mutex> g(s.mu);
      ++s.handovers_waited[pw];
    }
    s.arrive(s.handover_ack);
    pending = false;
  };
  for (size_t k = 0; k < ntiles_of.size(); ++k) {
    const int ntiles = ntiles_of[k];
    if ((!wide || s.wide_boxes) && !s.lead && !first && bug != kNoRowTileSync && bug != kWideBoxesNoRowTileSync) {
      s.long_pause(rng);  // (late at the barrier: what a double arrival of the consumers needs to show)
      s.named(kBarRowTile, kConsumers + kProducers, false, true, kConsumers + pw);
      if (k + 1 < ntiles_of.size()) s.named(kBarRowTileAck, kConsumers + kProducers, false, false, kConsumers + pw);
    }
    first = false;
    if (s.lead && ntiles > 0) {  // Q by tensor copy (warp 0), once the last QK of the row tile before released it
      if (pw == 0) {
        if (q_loads > 0) s.wait(s.qempty, (q_loads - 1) & 1);
        s.pause(rng);
        std::lock_guard<std::mutex> g(s.mu);
        if (s.q_readers != 0) s.fail_locked("Q of row tile " + std::to_string(k) + " loaded while " + std::to_string(s.q_readers) + " warps read the one before");
        s.q_tag = static_cast<long>(k);
        --s.qfull.pending;
        s.maybe_complete(s.qfull);
      }
      ++q_loads;
    }
    for (int j = 0; j < ntiles; ++j, ++ti) {
      if (s.lead && pending && j == 2) wait_handover();
      const int st = static_cast<int>(ti % s.stages);
      s.wait(s.empty[st], ((ti / s.stages) & 1) ^ (bug == kEmptyParity ? 0u : 1u));
      s.pause(rng);
      // Some rows of the quarter copied, the rest (past the end, or a page outside the cache)
      // written by the warp itself before its arrival; either may be none.
      const long copied = static_cast<long>(rng() % 17);
      std::lock_guard<std::mutex> g(s.mu);
      if (s.stage_readers[st] != 0)
        s.fail_locked("producer warp " + std::to_string(pw) + " writes stage " + std::to_string(st) + " for tile " +
                      std::to_string(ti) + " while " + std::to_string(s.stage_readers[st]) + " consumer warps read it");
      if (st < 2 && s.exchange_users != 0)
        s.fail_locked("producer warp " + std::to_string(pw) + " writes stage " + std::to_string(st) +
                      " during the merge exchange");
      if (st >= 1 && s.partial_users != 0)
        s.fail_locked("producer warp " + std::to_string(pw) + " writes stage " + std::to_string(st) + " while partials are staged");
      if (s.boxed[st] != 0)
        s.fail_locked("producer warp " + std::to_string(pw) + " writes stage " + std::to_string(st) + " for tile " +
                      std::to_string(ti) + " while o boxes are staged there");
      if (copied < 16) s.piece[st][pw] = ti;  // the generic fill (a quarter with no copy: all of it)
      s.full[st].tx += copied * 576;
      --s.full[st].pending;
      if (copied > 0) {
        s.piece[st][pw] = -2;  // in flight
        ++s.copies_pending[st];
        s.dma.push_back({st, pw, static_cast<long>(ti), copied * 576});
        s.cv.notify_all();
      }
      s.maybe_complete(s.full[st]);
    }
    if (s.lead) {  // an item of fewer than three tiles: the handover before the next one's first loads
      if (pending) wait_handover();
      pending = true;
    }
  }
}

// A consumer warp past `full` of tile ti in stage st: every producer quarter must hold that tile.
void start_reading(Sim& s, int w, int st, unsigned ti) {
  std::lock_guard<std::mutex> g(s.mu);
  for (int pw = 0; pw < kProducers; ++pw)
    if (s.piece[st][pw] != static_cast<long>(ti))
      s.fail_locked("consumer warp " + std::to_string(w) + " reads stage " + std::to_string(st) + " for tile " +
                    std::to_string(ti) + ": producer quarter " + std::to_string(pw) + " holds " +
                    std::to_string(s.piece[st][pw]));
  ++s.stage_readers[st];
}

// The vote of warpgroup c on tile ti (any score past m + slack), then the maxima through shared
// memory when it says so: each warp must read all four warps' entries of this tile.
void vote_and_maxima(Sim& s, int c, int wi, unsigned ti, std::mt19937_64& rng, bool cta_vote = false) {
  if (!(cta_vote ? s.named(kBarVote, kConsumers, rng() % 3 == 0) : s.named(kBarVote + c, 4, rng() % 3 == 0))) return;
  const long tag = 2 * static_cast<long>(ti);
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.colmax_tag[c][wi] = tag;
  }
  s.named(kBarMax + c, 4);
  s.pause(rng);
  std::lock_guard<std::mutex> g(s.mu);
  for (int x = 0; x < 4; ++x)
    if (s.colmax_tag[c][x] != tag)
      s.fail_locked("warpgroup " + std::to_string(c) + " warp " + std::to_string(wi) + " reads the maxima of tile " +
                    std::to_string(ti) + " with warp " + std::to_string(x) + "'s entry at " + std::to_string(s.colmax_tag[c][x]));
}

void consumer_warp(Sim& s, int w, const std::vector<int>& ntiles_of, int bug, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int c = w / 4, wi = w % 4;
  unsigned ti_run = 0;
  for (size_t k = 0; k < ntiles_of.size(); ++k) {
    const int ntiles = ntiles_of[k];
    s.named(kBarQ, kConsumers);  // (Q written and published in between when there are tiles)
    if (ntiles > 0) s.named(kBarQ, kConsumers);
    bool pv_pending = false;
    for (int j = c; j < ntiles; j += 2) {
      const unsigned ti = ti_run + static_cast<unsigned>(j);
      const int st = static_cast<int>(ti % s.stages);
      s.wait(s.full[st], (ti / s.stages) & 1);
      start_reading(s, w, st, ti);
      if (bug == kEarlyRelease) s.arrive(s.empty[st]);  // (it still reads the stage below)
      s.pause(rng);
      // QK: its first wait_group 0 retires this warp's PV of the tile before.
      if (pv_pending) {
        std::lock_guard<std::mutex> g(s.mu);
        --s.pv_in_flight[c];
        pv_pending = false;
      }
      s.pause(rng);
      const auto write_pt = [&] {
        std::lock_guard<std::mutex> g(s.mu);
        if (s.pv_in_flight[c] != 0)
          s.fail_locked("warpgroup " + std::to_string(c) + " warp " + std::to_string(wi) + " rewrites P^T for tile " +
                        std::to_string(ti) + " while " + std::to_string(s.pv_in_flight[c]) + " PV wgmmas read it");
      };
      if (bug == kPtBeforeVote) write_pt();
      vote_and_maxima(s, c, wi, ti, rng);
      if (bug != kPtBeforeVote) write_pt();
      s.named(kBarP + c, 4);
      {  // PV issued; the tile's bytes are in registers after its last conversion: release
        std::lock_guard<std::mutex> g(s.mu);
        ++s.pv_in_flight[c];
        pv_pending = true;
        --s.stage_readers[st];
      }
      if (bug != kEarlyRelease) s.arrive(s.empty[st]);
    }
    if (pv_pending) {  // the wait_group 0 after the loop
      std::lock_guard<std::mutex> g(s.mu);
      --s.pv_in_flight[c];
    }
    ti_run += static_cast<unsigned>(std::max(ntiles, 0));
    // Row sums through the maxima buffer, then the merge.
    const long tag = 2 * static_cast<long>(k) + (1L << 40);
    {
      std::lock_guard<std::mutex> g(s.mu);
      s.colmax_tag[c][wi] = tag;
    }
    s.named(kBarMax + c, 4);
    {
      std::lock_guard<std::mutex> g(s.mu);
      for (int x = 0; x < 4; ++x)
        if (s.colmax_tag[c][x] != tag)
          s.fail_locked("warpgroup " + std::to_string(c) + " warp " + std::to_string(wi) + " reads the row sums with warp " +
                        std::to_string(x) + "'s entry at " + std::to_string(s.colmax_tag[c][x]));
    }
    if (bug != kNoMergeBarrier) s.named(kBarMerge, kConsumers);
    {
      std::lock_guard<std::mutex> g(s.mu);
      if (s.stage_readers[0] + s.stage_readers[1] != 0 || s.copies_pending[0] + s.copies_pending[1] != 0)
        s.fail_locked("consumer warp " + std::to_string(w) + " writes the merge exchange while " +
                      std::to_string(s.stage_readers[0] + s.stage_readers[1]) + " warps read and " +
                      std::to_string(s.copies_pending[0] + s.copies_pending[1]) + " copies land in its stages");
      ++s.exchange_users;
    }
    s.pause(rng);
    if (bug == kNoMergeBarrier) s.named(kBarMerge, kConsumers);
    s.named(kBarMerge, kConsumers);
    s.pause(rng);
    {
      std::lock_guard<std::mutex> g(s.mu);
      --s.exchange_users;
    }
    const bool writer = wi / 2 == c;
    // The writers' staged partials (stages 1-3), copied out and their reads waited for.
    const auto stage_partials = [&] {
      {
        std::lock_guard<std::mutex> g(s.mu);
        for (int st = 1; st < s.stages; ++st)
          if (s.copies_pending[st] != 0 || s.stage_readers[st] != 0)
            s.fail_locked("partials staged in stage " + std::to_string(st) + " under a copy or a reader");
        ++s.partial_users;
      }
      s.pause(rng);
      std::lock_guard<std::mutex> g(s.mu);
      --s.partial_users;
    };
    if (s.staged_partials && writer && bug != kPartialsAfterRowTile) stage_partials();
    if (k + 1 < ntiles_of.size()) {
      if (k > 0 && bug != kNoRowTileAck) s.named(kBarRowTileAck, kConsumers + kProducers, false, true, w);
      s.named(kBarRowTile, kConsumers + kProducers, false, false, w);  // bar.arrive
    }
    if (s.staged_partials && writer && bug == kPartialsAfterRowTile) stage_partials();
  }
}

// The wide instantiation's consumer warp (consumer_wide in the kernel).
void consumer_warp_wide(Sim& s, int w, const std::vector<int>& ntiles_of, int bug, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int c = w / 4, wi = w % 4;
  unsigned ti_run = 0, q_loads = 0, items = 0;
  for (size_t k = 0; k < ntiles_of.size(); ++k) {
    const int ntiles = ntiles_of[k];
    s.named(kBarQ, kConsumers);
    bool reads_q = false;
    if (ntiles > 0) {
      if (s.lead) {  // Q of this row tile by tensor copy
        s.wait(s.qfull, q_loads & 1);
        ++q_loads;
        std::lock_guard<std::mutex> g(s.mu);
        if (s.q_tag != static_cast<long>(k)) s.fail_locked("consumer warp " + std::to_string(w) + " finds the Q of row tile " + std::to_string(s.q_tag) + " at row tile " + std::to_string(k));
        ++s.q_readers;
        reads_q = true;
      }
      s.named(kBarQ, kConsumers);
    }
    int pv_buf = -1;  // the buffer this warp's PV in flight reads
    for (int j = 0; j < ntiles; ++j) {
      const unsigned ti = ti_run + static_cast<unsigned>(j);
      const int st = static_cast<int>(ti % s.stages), b = bug == kWideOneBuffer || s.one_pt_buffer ? 0 : j % 2;
      s.wait(s.full[st], (ti / s.stages) & 1);
      start_reading(s, w, st, ti);
      s.pause_wg(rng, c);
      if (s.lead) {  // QK read Q: still this row tile's; after the last QK (the bug: the first) Q is released
        std::lock_guard<std::mutex> g(s.mu);
        if (s.q_tag != static_cast<long>(k))
          s.fail_locked("consumer warp " + std::to_string(w) + "'s QK of row tile " + std::to_string(k) + " reads the Q of row tile " + std::to_string(s.q_tag));
      }
      if (s.lead && reads_q && j == (bug == kLeadEarlyQRelease ? 0 : ntiles - 1)) {
        {
          std::lock_guard<std::mutex> g(s.mu);
          --s.q_readers;
        }
        reads_q = false;
        s.arrive(s.qempty);
      }
      if (pv_buf >= 0) {  // QK's first wait_group 0 retires this warp's PV of the tile before
        std::lock_guard<std::mutex> g(s.mu);
        --s.pv_in_flight_buf[pv_buf];
        pv_buf = -1;
      }
      s.pause_wg(rng, c);
      vote_and_maxima(s, c, wi, ti, rng, s.one_pt_buffer && bug != kOneBufferWgVote);
      {  // its rows of P^T and its factors (and flag) into buffer b
        std::lock_guard<std::mutex> g(s.mu);
        if (s.pv_in_flight_buf[b] != 0 || s.alpha_readers[b] != 0)
          s.fail_locked("wide: warpgroup " + std::to_string(c) + " rewrites P^T buffer " + std::to_string(b) + " for tile " +
                        std::to_string(ti) + " while " + std::to_string(s.pv_in_flight_buf[b]) + " PV and " +
                        std::to_string(s.alpha_readers[b]) + " factor readers use it");
      }
      s.named(kBarP, kConsumers);
      {
        std::lock_guard<std::mutex> g(s.mu);
        ++s.alpha_readers[b];
      }
      s.pause_wg(rng, c);
      {  // factors read; PV issued; the tile's bytes in registers after its last conversion
        std::lock_guard<std::mutex> g(s.mu);
        --s.alpha_readers[b];
        ++s.pv_in_flight_buf[b];
        pv_buf = b;
        --s.stage_readers[st];
      }
      s.arrive(s.empty[st]);
    }
    if (pv_buf >= 0) {  // the wait_group 0 after the loop
      std::lock_guard<std::mutex> g(s.mu);
      --s.pv_in_flight_buf[pv_buf];
    }
    ti_run += static_cast<unsigned>(std::max(ntiles, 0));
    const long tag = 2 * static_cast<long>(k) + (1L << 40);
    {
      std::lock_guard<std::mutex> g(s.mu);
      s.colmax_tag[c][wi] = tag;
    }
    s.named(kBarMax + c, 4);
    {  // warp 0 of each warpgroup: the row sums of its rows, then m and l into shared memory
      std::lock_guard<std::mutex> g(s.mu);
      for (int x = 0; x < 4; ++x)
        if (wi == 0 && s.colmax_tag[c][x] != tag)
          s.fail_locked("wide: warpgroup " + std::to_string(c) + " reads the row sums with warp " + std::to_string(x) +
                        "'s entry at " + std::to_string(s.colmax_tag[c][x]));
      if (wi == 0) {
        if (s.ml_readers != 0) s.fail_locked("wide: m and l rewritten while " + std::to_string(s.ml_readers) + " warps read them");
        s.ml_tag[c] = tag;
      }
    }
    s.named(kBarMerge, kConsumers);
    {
      std::lock_guard<std::mutex> g(s.mu);
      if (s.ml_tag[0] != tag || s.ml_tag[1] != tag)
        s.fail_locked("wide: consumer warp " + std::to_string(w) + " reads m and l of row tiles " + std::to_string(s.ml_tag[0]) +
                      " / " + std::to_string(s.ml_tag[1]));
      ++s.ml_readers;
      if (s.wide_boxes && !s.lead) {  // o staged in stages 0 and 1 (its warpgroup's 32 KB: modelled as both)
        for (int st = 0; st < 2; ++st)
          if (s.copies_pending[st] != 0 || s.stage_readers[st] != 0)
            s.fail_locked("wide: o staged in stage " + std::to_string(st) + " under a copy or a reader");
        ++s.exchange_users;
      }
    }
    // The lead: this warpgroup's boxes in the stage of tile ti_end + 2 + c (the bug: ti_end + c).
    const int box_st = static_cast<int>((ti_run + (bug == kLeadBoxesFirstStages ? 0u : 2u) + static_cast<unsigned>(c)) % s.stages);
    if (s.lead) {
      std::lock_guard<std::mutex> g(s.mu);
      if (s.copies_pending[box_st] != 0 || s.stage_readers[box_st] != 0)
        s.fail_locked("lead: o staged in stage " + std::to_string(box_st) + " under a copy or a reader");
      ++s.boxed[box_st];
    }
    s.pause(rng);
    {
      std::lock_guard<std::mutex> g(s.mu);
      --s.ml_readers;
      if (s.wide_boxes && !s.lead) --s.exchange_users;  // the boxes' copies read (their copier waited)
    }
    if (s.lead) {  // the staging read: hand it over once the producers acknowledged the handover before
      if (items > 0 && bug != kLeadNoAck) s.wait(s.handover_ack, (items - 1) & 1);
      ++items;
      std::lock_guard<std::mutex> g(s.mu);
      --s.boxed[box_st];
      --s.handover.pending;
      const unsigned before = s.handover.phase;
      s.maybe_complete(s.handover);
      if (s.handover.phase != before)
        for (int pw = 0; pw < kProducers; ++pw)
          if (s.handovers_waited[pw] + 1 < s.handover.phase)
            s.fail_locked("lead: handover " + std::to_string(s.handover.phase - 1) + " completes before producer warp " + std::to_string(pw) + " waited for the one before");
    }
    if (s.wide_boxes && !s.lead && bug != kWideBoxesNoRowTileSync && k + 1 < ntiles_of.size()) {
      if (k != 0) s.named(kBarRowTileAck, kConsumers + kProducers, false, true, w);
      s.named(kBarRowTile, kConsumers + kProducers, false, false, w);  // bar.arrive
    }
  }
}

std::string run_model(const std::vector<int>& ntiles_of, uint64_t seed, int bug = kNone, bool wide = false,
                      int stages = kMaxStages, bool one_pt_buffer = false, int slow_wg = -1, bool wide_boxes = false,
                      bool staged_partials = false, bool lead = false) {
  Sim s;
  s.staged_partials = staged_partials;
  s.wide_boxes = wide_boxes || lead;
  s.lead = lead;
  s.init_bar(s.qfull, 1);             // the producer's arrival (its bytes land with it here)
  s.init_bar(s.qempty, kConsumers);   // each consumer warp after the row tile's last QK
  s.init_bar(s.handover, kConsumers); // each consumer warp past its reads of the staging (the kernel: each thread)
  s.init_bar(s.handover_ack, kProducers);
  s.stages = stages;
  s.one_pt_buffer = one_pt_buffer;
  s.slow_wg = slow_wg;
  for (int st = 0; st < stages; ++st) {
    s.init_bar(s.full[st], kProducers);  // each producer warp's lane 0 (+ transaction bytes)
    // the warps that read the tile: the owning warpgroup's, or (wide) all 8
    s.init_bar(s.empty[st], wide && bug != kWideEmpty4 ? 8 : 4);
  }
  std::thread dma([&] {  // the copy engine: lands queued copies in random order, late
    std::mt19937_64 rng(seed);
    std::unique_lock<std::mutex> g(s.mu);
    for (;;) {
      s.cv.wait(g, [&] { return s.dma_stop || s.failed || !s.dma.empty(); });
      if (s.dma_stop || s.failed) return;
      const size_t k = rng() % s.dma.size();
      const Sim::Copy copy = s.dma[k];
      s.dma.erase(s.dma.begin() + static_cast<long>(k));
      g.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
      g.lock();
      if (s.stage_readers[copy.st] != 0) s.fail_locked("a copy lands in stage " + std::to_string(copy.st) + " under its readers");
      if (copy.st < 2 && s.exchange_users != 0) s.fail_locked("a copy lands in the merge exchange");
      if (copy.st >= 1 && s.partial_users != 0) s.fail_locked("a copy lands in stage " + std::to_string(copy.st) + " over staged partials");
      if (s.boxed[copy.st] != 0) s.fail_locked("a copy lands in stage " + std::to_string(copy.st) + " over staged o boxes");
      s.piece[copy.st][copy.pw] = copy.tile;
      --s.copies_pending[copy.st];
      s.full[copy.st].tx -= copy.bytes;
      s.maybe_complete(s.full[copy.st]);
    }
  });
  std::vector<std::thread> warps;
  for (int pw = 0; pw < kProducers; ++pw)
    warps.emplace_back([&, pw] { producer_warp(s, pw, ntiles_of, bug, wide, seed * 31 + pw); });
  for (int w = 0; w < kConsumers; ++w)
    warps.emplace_back([&, w] {
      if (wide) {
        consumer_warp_wide(s, w, ntiles_of, bug, seed * 17 + w);
      } else {
        consumer_warp(s, w, ntiles_of, bug, seed * 17 + w);
      }
    });
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int k = 0; k < 400 && !done; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!done) {
      std::lock_guard<std::mutex> g(s.mu);
      s.fail_locked("deadlock: no progress within 4 s");
    }
  });
  for (auto& t : warps) t.join();
  done = true;
  watchdog.join();
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.dma_stop = true;
    s.cv.notify_all();
  }
  dma.join();
  return s.failed ? s.why : "";
}

// A row-tile list (KV tiles each) for a failure message: "row tiles [7 0 9 ]".
std::string row_tiles_text(const std::vector<int>& ntiles) {
  std::string list;
  for (int n : ntiles) list += std::to_string(n) + " ";
  return "row tiles [" + list + "]";
}

// 40 random lists of 1-4 row tiles of 0-9 KV tiles each: the model finds nothing.
void expect_random_row_tiles(uint64_t seed, bool wide = false, int stages = kMaxStages, bool one_pt_buffer = false) {
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 40; ++iter) {
    std::vector<int> ntiles(1 + rng() % 4);
    for (int& n : ntiles) n = static_cast<int>(rng() % 10);
    const std::string err = run_model(ntiles, rng(), kNone, wide, stages, one_pt_buffer);
    ASSERT_EQ(err, "") << row_tiles_text(ntiles);
  }
}

TEST(MlaAttentionKeysMProtocol, RandomRowTiles) { expect_random_row_tiles(21); }

// The model sees the classes of bug it is meant to see. A wrong parity deadlocks or overwrites
// at once; the races are tried on a few seeds until one shows.
TEST(MlaAttentionKeysMProtocol, PlantedBugsAreCaught) {
  const std::vector<int> tiles = {7, 0, 9, 5, 8};
  EXPECT_NE(run_model(tiles, 1, kEmptyParity), "") << "empty parity without ^ 1";
  auto caught = [&](int bug) {
    for (uint64_t seed = 10; seed < 40; ++seed)
      if (!run_model(tiles, seed, bug).empty()) return true;
    return false;
  };
  EXPECT_TRUE(caught(kEarlyRelease)) << "stage released before it is read";
  EXPECT_TRUE(caught(kNoRowTileSync)) << "next row tile's stages filled during the merge exchange";
  EXPECT_TRUE(caught(kPtBeforeVote)) << "P^T written before the vote barrier";
  EXPECT_TRUE(caught(kNoMergeBarrier)) << "merge exchange written before both warpgroups are done";
  // Row tiles without KV tiles in a row: arriving consumers could arrive twice before the
  // producers complete the barrier.
  const std::vector<int> empty_runs = {3, 0, 0, 0, 0, 2};
  bool caught_no_ack = false;
  for (uint64_t seed = 10; seed < 40 && !caught_no_ack; ++seed) caught_no_ack = !run_model(empty_runs, seed, kNoRowTileAck).empty();
  EXPECT_TRUE(caught_no_ack) << "consumers at the next row-tile boundary without the producers' ack";
  EXPECT_EQ(run_model(empty_runs, 3), "");
}

TEST(MlaAttentionKeysMProtocol, WideRandomRowTiles) { expect_random_row_tiles(22, true); }

// A planted bug of the wide protocol shows on some seed, with one warpgroup lagging (either) or
// without.
bool wide_bug_caught(const std::vector<int>& tiles, int bug, int stages, bool one_pt_buffer = false) {
  for (uint64_t seed = 10; seed < 40; ++seed)
    for (const int slow_wg : {static_cast<int>(seed % 2), -1})
      if (!run_model(tiles, seed, bug, true, stages, one_pt_buffer, slow_wg).empty()) return true;
  return false;
}

// The wide protocol's planted bugs, each tried on a few seeds until one shows; the lagging
// warpgroup alone reports nothing.
void expect_wide_bugs_caught(int stages) {
  const std::vector<int> tiles = {7, 0, 9, 5, 8};
  auto caught = [&](int bug) { return wide_bug_caught(tiles, bug, stages); };
  for (const int slow_wg : {0, 1}) EXPECT_EQ(run_model(tiles, 5, kNone, true, stages, false, slow_wg), "") << "warpgroup " << slow_wg << " lagging";
  EXPECT_TRUE(caught(kWideOneBuffer)) << "one P^T buffer";
  EXPECT_TRUE(caught(kWideEmpty4)) << "a stage freed when one warpgroup is done with it";
  EXPECT_TRUE(caught(kEmptyParity)) << "empty parity without ^ 1";
}

TEST(MlaAttentionKeysMProtocol, WidePlantedBugsAreCaught) { expect_wide_bugs_caught(kMaxStages); }

// The bf16-cache kernel's protocol: the wide one with two stages.
TEST(MlaAttentionKeysMProtocol, Bf16TwoStagesRandomRowTiles) { expect_random_row_tiles(23, true, 2); }

TEST(MlaAttentionKeysMProtocol, Bf16TwoStagesPlantedBugsAreCaught) { expect_wide_bugs_caught(2); }

// The planned 64-row bf16 kernel's protocol (no kernel yet): two stages, one P^T buffer, the vote
// over all 8 warps. With the vote per warpgroup instead, the model sees P^T rewritten under the
// other warpgroup's PV.
TEST(MlaAttentionKeysMProtocol, Bf16WideOneBufferRandomRowTiles) { expect_random_row_tiles(24, true, 2, true); }

TEST(MlaAttentionKeysMProtocol, Bf16WideOneBufferNeedsTheCtaVote) {
  const std::vector<int> tiles = {7, 0, 9, 5, 8};
  EXPECT_TRUE(wide_bug_caught(tiles, kOneBufferWgVote, 2, true)) << "one P^T buffer with the vote per warpgroup";
  EXPECT_TRUE(run_model(tiles, 3, kNone, true, 2, true).empty());
  for (const int slow_wg : {0, 1}) EXPECT_EQ(run_model(tiles, 5, kNone, true, 2, true, slow_wg), "") << "warpgroup " << slow_wg << " lagging";
}

// The wide fp8 kernel's o boxes staged in the stages, where a CTA walks several row tiles: with
// the row-tile barrier the model finds nothing; without it (the kernel until the forty-seventh
// session) the producers fill the next row tile's stages while o is staged there.
TEST(MlaAttentionKeysMProtocol, WideBoxesWaitAtTheRowTileBarrier) {
  std::mt19937_64 rng(25);
  for (int iter = 0; iter < 30; ++iter) {
    std::vector<int> ntiles(1 + rng() % 4);
    for (int& n : ntiles) n = static_cast<int>(rng() % 10);
    ASSERT_EQ(run_model(ntiles, rng(), kNone, true, kMaxStages, false, -1, true), "") << row_tiles_text(ntiles);
  }
  const std::vector<int> tiles = {7, 0, 9, 5, 8};
  bool caught = false;
  for (uint64_t seed = 10; seed < 40 && !caught; ++seed)
    for (const int slow_wg : {static_cast<int>(seed % 2), -1})
      caught = caught || !run_model(tiles, seed, kWideBoxesNoRowTileSync, true, kMaxStages, false, slow_wg, true).empty();
  EXPECT_TRUE(caught) << "wide boxes without the row-tile barrier";
}

// The 32-row form's split partials staged past the exchange (ws-boxes): random row-tile lists pass;
// staged after the writers arrived at the row-tile barrier, the producers fill those stages under
// them.
TEST(MlaAttentionKeysMProtocol, StagedPartialsBeforeTheRowTileBarrier) {
  std::mt19937_64 rng(27);
  for (int iter = 0; iter < 30; ++iter) {
    std::vector<int> ntiles(1 + rng() % 4);
    for (int& n : ntiles) n = static_cast<int>(rng() % 10);
    ASSERT_EQ(run_model(ntiles, rng(), kNone, false, kMaxStages, false, -1, false, true), "") << row_tiles_text(ntiles);
  }
  const std::vector<int> tiles = {7, 0, 9, 5, 8};
  bool caught = false;
  for (uint64_t seed = 10; seed < 40 && !caught; ++seed)
    caught = !run_model(tiles, seed, kPartialsAfterRowTile, false, kMaxStages, false, -1, false, true).empty();
  EXPECT_TRUE(caught) << "partials staged after the row-tile barrier";
}

// The lead (v3 wide walking the batch, producer_lead): random lists of 1-8 row tiles of 0-9 tiles
// (short ones, where the handover waits at a row tile's end, among them) pass, with either
// warpgroup lagging or neither; each planted bug shows on some seed.
TEST(MlaAttentionKeysMProtocol, WideBoxesLeadKeepsItsStagesAndQ) {
  std::mt19937_64 rng(26);
  for (int iter = 0; iter < 30; ++iter) {
    std::vector<int> ntiles(1 + rng() % 8);
    for (int& n : ntiles) n = static_cast<int>(rng() % 10) / (rng() % 2 + 1);
    const int slow_wg = static_cast<int>(iter % 3) - 1;
    ASSERT_EQ(run_model(ntiles, rng(), kNone, true, kMaxStages, false, slow_wg, true, false, true), "") << row_tiles_text(ntiles);
  }
  const auto caught = [](const std::vector<int>& tiles, int bug) {
    for (uint64_t seed = 10; seed < 40; ++seed)
      for (const int slow_wg : {static_cast<int>(seed % 2), -1})
        if (!run_model(tiles, seed, bug, true, kMaxStages, false, slow_wg, true, false, true).empty()) return true;
    return false;
  };
  const std::vector<int> tiles = {7, 1, 9, 0, 2, 5, 3, 8};
  EXPECT_TRUE(caught(tiles, kLeadNoHandoverWait)) << "no wait for the boxes' handover";
  EXPECT_TRUE(caught(tiles, kLeadBoxesFirstStages)) << "the boxes in the next row tile's first two stages";
  EXPECT_TRUE(caught(tiles, kLeadEarlyQRelease)) << "Q released after the first QK";
  EXPECT_TRUE(caught({3, 0, 0, 0, 0, 1, 0, 0, 4}, kLeadNoAck)) << "handover without the acknowledgement";
}

}  // namespace
