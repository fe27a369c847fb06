/* NCCL's GIN (GPU-initiated networking) plugin ABI, version 11: what NCCL 2.28.9 looks up in a
 * net plugin library beside ncclNetPlugin_v11 (the symbol "ncclGinPlugin_v11"). libxport's own
 * declaration of the table and constants the plugin needs, written from NCCL 2.28.9's layout
 * (src/include/plugin/net/net_v11.h and nccl_net.h, NCCL 2.28.9; NCCL installs no plugin
 * headers). Field order, types and sizes must match NCCL's exactly; static_asserts check the
 * offsets (plugins/nccl/gin_v11.cc). The properties and the device handle are the net ABI's
 * (abi/net_v11.h). Used from C++ only. */
#ifndef XPORT_NCCL_ABI_GIN_V11_H_
#define XPORT_NCCL_ABI_GIN_V11_H_

#include <stddef.h>
#include <stdint.h>

#include "abi/net_v11.h"

/* nccl_net.h (2.28.9) */
#define NCCL_NET_MR_FLAG_FORCE_SO (1 << 0) /* regMrSym: strong ordering asked (signals) */
#define NCCL_NET_SIGNAL_OP_INC 0x1         /* iputSignal: add 1 */
#define NCCL_NET_SIGNAL_OP_ADD 0x2         /* iputSignal: add signalValue */
#define NCCL_NET_MAX_REQUESTS 32           /* NCCL sizes a GIN proxy queue as this x maxRecvs */

/* nccl_device/gin/proxy/gin_proxy_device_host_common.h: the version a proxy device reports */
#define NCCL_GIN_PROXY_VERSION 100

/* plugin/net/net_v11.h (2.28.9) */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  /* Collective over the handles every rank's listen gave; blocks until the group is formed. */
  ncclResult_t (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
                          void** collComm);
  /* Device-side contexts: not used for proxy-type devices (NCCL's proxy thread makes its own). */
  ncclResult_t (*createContext)(void* collComm, int nSignals, int nCounters, void** ginCtx,
                                ncclNetDeviceHandle_v11_t** devHandle);
  ncclResult_t (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags,
                           void** mhandle, void** ginHandle);
  ncclResult_t (*regMrSymDmaBuf)(void* collComm, void* data, size_t size, int type,
                                 uint64_t offset, int fd, uint64_t mrFlags, void** mhandle,
                                 void** ginHandle);
  ncclResult_t (*deregMrSym)(void* collComm, void* mhandle);
  ncclResult_t (*destroyContext)(void* ginCtx);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*iput)(void* collComm, uint64_t srcOff, void* srcMhandle, size_t size,
                       uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request);
  ncclResult_t (*iputSignal)(void* collComm, uint64_t srcOff, void* srcMhandle, size_t size,
                             uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                             void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                             void** request);
  ncclResult_t (*test)(void* collComm, void* request, int* done);
  /* Called by NCCL's GIN progress thread (proxy devices) between its queue polls. */
  ncclResult_t (*ginProgress)(void* collComm);
  ncclResult_t (*queryLastError)(void* ginCtx, bool* hasError);
  ncclResult_t (*finalize)(void* ctx);
} ncclGin_v11_t;

#endif /* XPORT_NCCL_ABI_GIN_V11_H_ */
