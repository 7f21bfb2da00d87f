/* libFuzzer target: tensor IPC handles (include/devmm/ipc.h) read by devmm_ipc_tensor_handle_info,
 * which maps nothing. Half the inputs are given a correct magic, version and CRC-32 (zlib's, as the
 * wire format says) so that the checks past the checksum are reached. Every input is refused with
 * a message, or described with a layout that holds together: ndim 0..DEVMM_MAX_NDIM, a known
 * dtype of whole bytes, no negative extent, only known flags. */
#include <devmm/devmm.h>

#include <stdlib.h>
#include <string.h>

static uint32_t crc32_of(uint32_t crc, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++)
      crc = crc >> 1 ^ (0xedb88320u & -(crc & 1));
  }
  return crc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4 * DEVMM_IPC_TENSOR_HANDLE_MAX)
    return 0;
  uint8_t *h = malloc(size ? size : 1);
  if (!h)
    return 0;
  memcpy(h, data, size);
  if (size >= DEVMM_IPC_TENSOR_HEADER_SIZE && (data[0] & 1)) {
    memcpy(h, "devmmT", 6);
    h[6] = DEVMM_IPC_TENSOR_VERSION, h[7] = 0;
    memset(h + 296, 0, 4); /* the CRC covers bytes 264.. with its own field read as 0 */
    uint32_t crc = ~crc32_of(0xffffffffu, h + 264, size - 264);
    for (int i = 0; i < 4; i++)
      h[296 + i] = (uint8_t)(crc >> 8 * i);
  }
  devmm_ipc_tensor_info info = {.struct_size = sizeof info};
  devmm_clear_error();
  int rc = devmm_ipc_tensor_handle_info(h, size, &info);
  if (rc != DEVMM_OK) {
    if (rc >= 0 || !*devmm_last_error())
      abort(); /* a refusal is a negative status with a message */
  } else if (info.is_tensor) {
    if (info.ndim < 0 || info.ndim > DEVMM_MAX_NDIM || devmm_dtype_itemsize(info.dtype) == 0 ||
        (info.readonly != 0 && info.readonly != 1))
      abort();
    for (int i = 0; i < info.ndim; i++)
      if (info.shape[i] < 0)
        abort();
  }
  free(h);
  return 0;
}
