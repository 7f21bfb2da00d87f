/* Suite dtype: every dtype name round-trips, the codes are DLPack's, bad input is refused. */
#include <check.h>

#include "testres.h"

START_TEST(dtype_roundtrip_every_name) {
  ck_assert_uint_ge(devmm_dtype_count(), 26);
  for (size_t i = 0; i < devmm_dtype_count(); i++) {
    const char *name = devmm_dtype_name_at(i);
    devmm_dtype t;
    char back[32];
    ck_assert_int_eq(devmm_dtype_parse(name, &t), DEVMM_OK);
    ck_assert_int_eq(devmm_dtype_format(t, back, sizeof back), DEVMM_OK);
    ck_assert_str_eq(back, name);
  }
  ck_assert_ptr_null(devmm_dtype_name_at(devmm_dtype_count()));
}
END_TEST

START_TEST(dtype_codes_match_dlpack) {
  struct {
    const char *name;
    unsigned code, bits;
    size_t itemsize;
  } cases[] = {
      {"int8", 0, 8, 1},           {"uint64", 1, 64, 8},       {"float32", 2, 32, 4},
      {"bfloat16", 4, 16, 2},      {"complex128", 5, 128, 16}, {"bool", 6, 8, 1},
      {"float8_e4m3fn", 10, 8, 1}, {"float8_e5m2", 12, 8, 1},  {"float4_e2m1fn", 17, 4, 0},
      {"float6_e2m3fn", 15, 6, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    devmm_dtype t;
    ck_assert_int_eq(devmm_dtype_parse(cases[i].name, &t), DEVMM_OK);
    ck_assert_uint_eq(t.code, cases[i].code);
    ck_assert_uint_eq(t.bits, cases[i].bits);
    ck_assert_uint_eq(t.lanes, 1);
    ck_assert_uint_eq(devmm_dtype_itemsize(t), cases[i].itemsize);
  }
}
END_TEST

START_TEST(dtype_bad_input) {
  devmm_dtype t;
  ck_assert_int_eq(devmm_dtype_parse("float33", &t), DEVMM_EINVAL);
  ck_assert_error_contains("unknown dtype 'float33'");
  ck_assert_error_contains("expected one of");
  ck_assert_int_eq(devmm_dtype_parse(NULL, &t), DEVMM_EINVAL);
  ck_assert_error_contains("name is NULL");
  char buf[4];
  devmm_dtype f32 = {2, 32, 1};
  ck_assert_int_eq(devmm_dtype_format(f32, buf, sizeof buf), DEVMM_EINVAL);
  ck_assert_error_contains("too small");
  devmm_dtype weird = {2, 24, 1};
  char big[32];
  ck_assert_int_eq(devmm_dtype_format(weird, big, sizeof big), DEVMM_EINVAL);
  ck_assert_error_contains("unknown dtype {code=2, bits=24");
  devmm_dtype vec = {2, 32, 4};
  ck_assert_uint_eq(devmm_dtype_itemsize(vec), 0);
}
END_TEST

Suite *dtype_suite(void) {
  Suite *s = suite_create("dtype");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, dtype_roundtrip_every_name);
  tcase_add_test(tc, dtype_codes_match_dlpack);
  tcase_add_test(tc, dtype_bad_input);
  suite_add_tcase(s, tc);
  return s;
}
