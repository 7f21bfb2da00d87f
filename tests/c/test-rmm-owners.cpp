// The RMM bridge's bookkeeping for rmm.current (plugins/rmm/owners.hpp), checked with a
// stand-in resource type: RMM itself needs a GPU to allocate. Each free must reach the
// resource that allocated, even after RAPIDS installed another one (rmm.reinitialize()), and
// that resource must stay alive until its last allocation is freed.
#include "../../plugins/rmm/owners.hpp"
#include "expect.hpp"

#include <cstdio>

static int alive; // stand-in resources not destroyed yet

// Copies share identity, as RMM's shared resources do (a copy of a pool is the same pool).
struct resource {
  int id;
  explicit resource(int i) : id(i) { alive++; }
  resource(const resource &o) : id(o.id) { alive++; }
  ~resource() { alive--; }
  bool operator==(const resource &o) const { return id == o.id; }
};

int main() {
  {
    devmm_rmm::owners<resource> who;
    int a, b, c;
    auto first = who.intern(resource(1)); // RMM's current resource at the first allocation
    who.add(&a, first);
    who.add(&b, who.intern(resource(1)));
    EXPECT(who.intern(resource(1)) == first); // the same resource: one shared handle
    auto second = who.intern(resource(2));    // rmm.reinitialize() installed another one
    EXPECT(second != first && second->id == 2);
    who.add(&c, second);
    first.reset();
    second.reset();
    EXPECT(who.live() == 3);
    auto owner_a = who.take(&a);
    EXPECT(owner_a && owner_a->id == 1); // back to the resource that allocated, not the current
    auto owner_c = who.take(&c);
    EXPECT(owner_c && owner_c->id == 2);
    EXPECT(who.take(&a) == nullptr); // freed already: refused, never sent to a resource
    int never;
    EXPECT(who.take(&never) == nullptr);
    who.restore(&a, owner_a); // its free failed: still live
    EXPECT(who.live() == 2);
    EXPECT(who.take(&a)->id == 1 && who.take(&b)->id == 1);
    EXPECT(who.live() == 0);
    owner_a.reset();
    owner_c.reset();
  }
  EXPECT(alive == 0); // every resource released once its allocations are gone
  return report();
}
