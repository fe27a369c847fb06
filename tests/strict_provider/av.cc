// Address vector of the strict provider: a thin pass-through, wrapped so that endpoint binds see
// only objects of this provider and translate them to the base's.
#include "strict.hpp"

namespace strict {
namespace {

int av_close(fid* f) {
  auto* av = reinterpret_cast<Av*>(f);
  int ret = fi_close(&av->base->fid);
  if (ret != 0) return ret;
  delete av;
  return 0;
}

int av_bind(fid* f, fid* bfid, uint64_t flags) {
  return fi_av_bind(reinterpret_cast<Av*>(f)->base, bfid, flags);  // an EQ of the base
}

fi_ops av_fid_ops = {
    .size = sizeof(fi_ops),
    .close = av_close,
    .bind = av_bind,
    .control = no_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

fid_av* base_of(fid_av* av) { return reinterpret_cast<Av*>(av)->base; }

fi_ops_av av_ops = {
    .size = sizeof(fi_ops_av),
    .insert =
        [](fid_av* av, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
           void* context) {
          return fi_av_insert(base_of(av), addr, count, fi_addr, flags, context);
        },
    .insertsvc =
        [](fid_av* av, const char* node, const char* service, fi_addr_t* fi_addr, uint64_t flags,
           void* context) {
          return fi_av_insertsvc(base_of(av), node, service, fi_addr, flags, context);
        },
    .insertsym =
        [](fid_av* av, const char* node, size_t nodecnt, const char* service, size_t svccnt,
           fi_addr_t* fi_addr, uint64_t flags, void* context) {
          return fi_av_insertsym(base_of(av), node, nodecnt, service, svccnt, fi_addr, flags,
                                 context);
        },
    .remove = [](fid_av* av, fi_addr_t* fi_addr, size_t count,
                 uint64_t flags) { return fi_av_remove(base_of(av), fi_addr, count, flags); },
    .lookup = [](fid_av* av, fi_addr_t fi_addr, void* addr,
                 size_t* addrlen) { return fi_av_lookup(base_of(av), fi_addr, addr, addrlen); },
    .straddr = [](fid_av* av, const void* addr, char* buf,
                  size_t* len) { return fi_av_straddr(base_of(av), addr, buf, len); },
    .av_set = [](fid_av*, fi_av_set_attr*, fid_av_set**, void*) { return -FI_ENOSYS; },
};

}  // namespace

Av* as_av(fid* f) {
  return f != nullptr && f->fclass == FI_CLASS_AV && f->ops == &av_fid_ops
             ? reinterpret_cast<Av*>(f)
             : nullptr;
}

int open_av(Domain* d, fi_av_attr* attr, fid_av** out, void* context) {
  auto* av = new Av();
  int ret = fi_av_open(d->base, attr, &av->base, context);
  if (ret != 0) {
    delete av;
    return ret;
  }
  av->av.fid.fclass = FI_CLASS_AV;
  av->av.fid.context = context;
  av->av.fid.ops = &av_fid_ops;
  av->av.ops = &av_ops;
  *out = &av->av;
  return 0;
}

}  // namespace strict
