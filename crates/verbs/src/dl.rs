//! The run-time loader: libibverbs and librdmacm are opened with `dlopen` on the
//! first RDMA use, and every C function this crate calls goes through the tables of
//! function pointers resolved here, once per process ([`api`]).
//!
//! Why: linked at build time, the two libraries were load-time dependencies of all
//! three binaries, which then did not even start (exit 127) on a host without
//! rdma-core, so the TCP fallback never got a chance. Loaded here, a missing library
//! is an ordinary [`VerbsError::LibraryMissing`]: `auto` uses TCP, `--transport
//! rdma` says what to install.
//!
//! rdma-sys stays the one FFI layer: its bindgen output supplies every type and
//! struct layout, and the `signatures_match_rdma_sys` test checks at compile time
//! that each signature below is the one rdma-sys declares. Outside that test its
//! `extern` functions are never referenced, so the linker (rustc passes
//! `--as-needed`) records no `DT_NEEDED` entry for them. The verbs that
//! libibverbs' headers define `static inline` (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`) call the provider through `context->ops`
//! and need no symbol; rdma-sys's Rust versions of them are used as they are.
//! `ibv_query_port`'s inline part reaches for a symbol, so [`query_port`] mirrors it.
//!
//! Order: [`api`] runs `ibv_fork_init` right after resolving the tables, before
//! handing them to anyone, so it precedes every other verbs call by construction.

use crate::{ForkSafety, VerbsError};
use libc::{c_char, c_int, c_uint, c_void};
use rdma_sys as sys;
use std::ffi::CStr;
use std::sync::OnceLock;

/// The sonames looked up (what the link used to record as `DT_NEEDED`).
pub(crate) const LIBIBVERBS: &str = "libibverbs.so.1";
/// See [`LIBIBVERBS`].
pub(crate) const LIBRDMACM: &str = "librdmacm.so.1";

/// Declares a table of C functions: the struct, its resolution by `dlsym`, and a
/// test that each signature equals rdma-sys's declaration.
macro_rules! fn_table {
    ($(#[$doc:meta])* $name:ident, $test:ident { $($f:ident: fn($($a:ty),*) $(-> $r:ty)?;)* }) => {
        $(#[$doc])*
        pub(crate) struct $name {
            $(pub(crate) $f: unsafe extern "C" fn($($a),*) $(-> $r)?,)*
        }

        impl $name {
            fn resolve(lib: &Handle) -> Result<Self, LoadError> {
                Ok($name {
                    $($f: {
                        let p = lib.sym(concat!(stringify!($f), "\0"))?;
                        // SAFETY: `p` is the non-null address of the exported C
                        // function of this name, whose signature is the one
                        // declared here (checked against rdma-sys by `$test`).
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($a),*) $(-> $r)?>(p)
                        }
                    },)*
                })
            }
        }

        #[cfg(test)]
        #[test]
        fn $test() {
            // Compiles only if every field's type is exactly rdma-sys's signature.
            // (This test binary links the libraries; the release binaries do not.)
            $(let _: unsafe extern "C" fn($($a),*) $(-> $r)? = sys::$f;)*
        }
    };
}

fn_table! {
    /// The libibverbs functions this crate uses.
    Ibv, ibv_signatures_match_rdma_sys {
        ibv_fork_init: fn() -> c_int;
        ibv_is_fork_initialized: fn() -> sys::ibv_fork_status;
        ibv_get_device_list: fn(*mut c_int) -> *mut *mut sys::ibv_device;
        ibv_free_device_list: fn(*mut *mut sys::ibv_device);
        ibv_get_device_name: fn(*mut sys::ibv_device) -> *const c_char;
        ibv_open_device: fn(*mut sys::ibv_device) -> *mut sys::ibv_context;
        ibv_close_device: fn(*mut sys::ibv_context) -> c_int;
        ibv_query_device: fn(*mut sys::ibv_context, *mut sys::ibv_device_attr) -> c_int;
        ibv_query_port: fn(*mut sys::ibv_context, u8, *mut sys::_compat_ibv_port_attr) -> c_int;
        ibv_alloc_pd: fn(*mut sys::ibv_context) -> *mut sys::ibv_pd;
        ibv_dealloc_pd: fn(*mut sys::ibv_pd) -> c_int;
        ibv_reg_mr: fn(*mut sys::ibv_pd, *mut c_void, usize, c_int) -> *mut sys::ibv_mr;
        ibv_dereg_mr: fn(*mut sys::ibv_mr) -> c_int;
        ibv_create_comp_channel: fn(*mut sys::ibv_context) -> *mut sys::ibv_comp_channel;
        ibv_destroy_comp_channel: fn(*mut sys::ibv_comp_channel) -> c_int;
        ibv_create_cq: fn(
            *mut sys::ibv_context,
            c_int,
            *mut c_void,
            *mut sys::ibv_comp_channel,
            c_int
        ) -> *mut sys::ibv_cq;
        ibv_destroy_cq: fn(*mut sys::ibv_cq) -> c_int;
        ibv_get_cq_event: fn(
            *mut sys::ibv_comp_channel,
            *mut *mut sys::ibv_cq,
            *mut *mut c_void
        ) -> c_int;
        ibv_ack_cq_events: fn(*mut sys::ibv_cq, c_uint);
        ibv_wc_status_str: fn(sys::ibv_wc_status::Type) -> *const c_char;
    }
}

fn_table! {
    /// The librdmacm functions this crate uses.
    Cm, cm_signatures_match_rdma_sys {
        rdma_create_event_channel: fn() -> *mut sys::rdma_event_channel;
        rdma_destroy_event_channel: fn(*mut sys::rdma_event_channel);
        rdma_create_id: fn(
            *mut sys::rdma_event_channel,
            *mut *mut sys::rdma_cm_id,
            *mut c_void,
            sys::rdma_port_space::Type
        ) -> c_int;
        rdma_destroy_id: fn(*mut sys::rdma_cm_id) -> c_int;
        rdma_bind_addr: fn(*mut sys::rdma_cm_id, *mut libc::sockaddr) -> c_int;
        rdma_listen: fn(*mut sys::rdma_cm_id, c_int) -> c_int;
        rdma_get_src_port: fn(*mut sys::rdma_cm_id) -> sys::__be16;
        rdma_resolve_addr: fn(
            *mut sys::rdma_cm_id,
            *mut libc::sockaddr,
            *mut libc::sockaddr,
            c_int
        ) -> c_int;
        rdma_resolve_route: fn(*mut sys::rdma_cm_id, c_int) -> c_int;
        rdma_connect: fn(*mut sys::rdma_cm_id, *mut sys::rdma_conn_param) -> c_int;
        rdma_accept: fn(*mut sys::rdma_cm_id, *mut sys::rdma_conn_param) -> c_int;
        rdma_reject: fn(*mut sys::rdma_cm_id, *const c_void, u8) -> c_int;
        rdma_disconnect: fn(*mut sys::rdma_cm_id) -> c_int;
        rdma_set_option: fn(*mut sys::rdma_cm_id, c_int, c_int, *mut c_void, usize) -> c_int;
        rdma_get_cm_event: fn(*mut sys::rdma_event_channel, *mut *mut sys::rdma_cm_event) -> c_int;
        rdma_ack_cm_event: fn(*mut sys::rdma_cm_event) -> c_int;
        rdma_create_qp: fn(*mut sys::rdma_cm_id, *mut sys::ibv_pd, *mut sys::ibv_qp_init_attr) -> c_int;
        rdma_destroy_qp: fn(*mut sys::rdma_cm_id);
    }
}

/// Both tables, plus what `ibv_fork_init` said (it ran before anything else).
pub(crate) struct Api {
    pub(crate) ibv: Ibv,
    pub(crate) cm: Cm,
    /// `Err(errno)` when `ibv_fork_init` failed.
    pub(crate) fork: Result<ForkSafety, i32>,
}

/// Why loading a library failed. Each shows as the dynamic loader's own words
/// (which name the library or the symbol): the `reason` of
/// [`VerbsError::LibraryMissing`].
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum LoadError {
    /// The soname holds a NUL byte (it cannot be passed to `dlopen`).
    #[error("{source}")]
    BadName {
        /// The soname.
        lib: &'static str,
        /// Where the NUL is.
        source: std::ffi::NulError,
    },
    /// `dlopen` failed: the library is not installed, or not loadable.
    #[error("{reason}")]
    Open {
        /// The soname.
        lib: &'static str,
        /// `dlerror`'s text.
        reason: String,
    },
    /// The library loaded but does not export a function this crate calls.
    #[error("{reason}")]
    Symbol {
        /// The soname.
        lib: &'static str,
        /// The function's name.
        symbol: &'static str,
        /// `dlerror`'s text.
        reason: String,
    },
}

impl LoadError {
    /// The library that failed to load.
    fn lib(&self) -> &'static str {
        match self {
            LoadError::BadName { lib, .. }
            | LoadError::Open { lib, .. }
            | LoadError::Symbol { lib, .. } => lib,
        }
    }
}

impl From<&LoadError> for VerbsError {
    fn from(e: &LoadError) -> VerbsError {
        VerbsError::LibraryMissing {
            lib: e.lib(),
            reason: e.to_string(),
        }
    }
}

static API: OnceLock<Result<Api, LoadError>> = OnceLock::new();

/// The loaded libraries: opened, resolved and fork-initialised on the first call,
/// the same answer afterwards. The only way to reach a verbs function.
pub(crate) fn api() -> Result<&'static Api, VerbsError> {
    API.get_or_init(load).as_ref().map_err(VerbsError::from)
}

/// The tables, for code that holds a verbs handle (a channel, an id, a device
/// list...): each was made through [`api`], so the libraries are loaded.
pub(crate) fn loaded() -> &'static Api {
    match API.get() {
        Some(Ok(api)) => api,
        _ => unreachable!("verbs handles exist only after the RDMA libraries loaded"),
    }
}

/// libibverbs' table; see [`loaded`].
pub(crate) fn ibv() -> &'static Ibv {
    &loaded().ibv
}

/// librdmacm's table; see [`loaded`].
pub(crate) fn cm() -> &'static Cm {
    &loaded().cm
}

fn load() -> Result<Api, LoadError> {
    let ibv = open_table(LIBIBVERBS, Ibv::resolve)?;
    let cm = open_table(LIBRDMACM, Cm::resolve)?;
    let fork = fork_init(&ibv);
    Ok(Api { ibv, cm, fork })
}

fn open_table<T>(
    lib: &'static str,
    resolve: fn(&Handle) -> Result<T, LoadError>,
) -> Result<T, LoadError> {
    resolve(&Handle::open(lib)?)
}

/// `ibv_fork_init`, unless the kernel makes it unneeded.
fn fork_init(ibv: &Ibv) -> Result<ForkSafety, i32> {
    // SAFETY: no arguments; only libibverbs' own global state, which it guards.
    let status = unsafe { (ibv.ibv_is_fork_initialized)() };
    if status == sys::IBV_FORK_UNNEEDED {
        return Ok(ForkSafety::Unneeded);
    }
    // SAFETY: as above. No other verbs call has happened yet: the tables are
    // handed out only after this returns.
    match unsafe { (ibv.ibv_fork_init)() } {
        0 => Ok(ForkSafety::Enabled),
        e => Err(e),
    }
}

/// A library opened with `dlopen`. Never closed: the function pointers taken from
/// it live in a process-wide static, and libibverbs loads its providers from it.
struct Handle {
    ptr: *mut c_void,
    /// The soname it was opened by, for errors.
    lib: &'static str,
}

impl Handle {
    fn open(lib: &'static str) -> Result<Self, LoadError> {
        let name =
            std::ffi::CString::new(lib).map_err(|source| LoadError::BadName { lib, source })?;
        // SAFETY: a NUL-terminated name. Running the library's initialisers is the
        // point; rdma-core's do not call back into this process.
        let ptr = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if ptr.is_null() {
            return Err(LoadError::Open {
                lib,
                reason: dl_error(),
            });
        }
        Ok(Handle { ptr, lib })
    }

    /// The address of `name` (NUL-terminated); an error when it is not exported.
    fn sym(&self, name: &'static str) -> Result<*mut c_void, LoadError> {
        debug_assert!(name.ends_with('\0'));
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.ptr, name.as_ptr().cast()) };
        if p.is_null() {
            return Err(LoadError::Symbol {
                lib: self.lib,
                symbol: name.trim_end_matches('\0'),
                reason: dl_error(),
            });
        }
        Ok(p)
    }
}

/// The dynamic loader's last error message (thread-local in glibc).
fn dl_error() -> String {
    // SAFETY: no arguments; returns NULL or a NUL-terminated string valid until the
    // next dl* call on this thread, copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return "unknown dynamic loader error".into();
    }
    // SAFETY: non-null and NUL-terminated (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `ibv_query_port` as libibverbs' header defines it (a `static inline` that
/// prefers the provider's extended `query_port` and falls back to the exported
/// compat symbol), with the exported part taken from the table.
///
/// # Safety
/// `ctx` must be a live device context and `port_num` one of its ports.
pub(crate) unsafe fn query_port(
    api: &Api,
    ctx: *mut sys::ibv_context,
    port_num: u8,
    attr: &mut sys::ibv_port_attr,
) -> c_int {
    // `__VERBS_ABI_IS_EXTENDED`: the context is the last member of a larger
    // `verbs_context`.
    const EXTENDED: usize = u32::MAX as usize;
    // SAFETY: `ctx` is live (the caller's promise).
    if unsafe { (*ctx).abi_compat } as usize == EXTENDED {
        let off = std::mem::offset_of!(sys::verbs_context, context);
        // SAFETY: an extended context sits at `off` inside its verbs_context
        // (container_of), which libibverbs allocated with at least `sz` bytes.
        let vctx = unsafe { ctx.cast::<u8>().sub(off).cast::<sys::verbs_context>() };
        let need = std::mem::size_of::<sys::verbs_context>()
            - std::mem::offset_of!(sys::verbs_context, query_port);
        // SAFETY: as above; `sz` is the first thing the header checks too, and
        // `query_port` is read only when the struct is large enough to hold it.
        if let Some(q) = unsafe { ((*vctx).sz >= need).then(|| (*vctx).query_port).flatten() } {
            // SAFETY: the provider's own entry point, with the full struct's size.
            return unsafe {
                q(
                    ctx,
                    port_num,
                    attr,
                    std::mem::size_of::<sys::ibv_port_attr>(),
                )
            };
        }
    }
    // SAFETY: all-zero is a valid ibv_port_attr (plain old data).
    *attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context; the compat struct is a prefix of ibv_port_attr, as the
    // header's own cast assumes.
    unsafe { (api.ibv.ibv_query_port)(ctx, port_num, (attr as *mut sys::ibv_port_attr).cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_says_what_to_install() {
        let e = open_table("librdpipe-no-such-library.so.1", Ibv::resolve)
            .err()
            .expect("a library that does not exist cannot load");
        let msg = VerbsError::from(&e).to_string();
        assert!(msg.contains("librdpipe-no-such-library.so.1"), "{msg}");
        assert!(
            msg.contains("install rdma-core (libibverbs, librdmacm)"),
            "{msg}"
        );
        assert!(matches!(
            VerbsError::from(&e),
            VerbsError::LibraryMissing { .. }
        ));
    }

    #[test]
    fn a_missing_symbol_is_reported_by_name() {
        // libc is always there; it exports no verbs.
        let h = Handle::open("libc.so.6").expect("libc loads");
        let err = h.sym("ibv_fork_init\0").unwrap_err();
        assert!(err.to_string().contains("ibv_fork_init"), "{err}");
        assert!(
            matches!(
                err,
                LoadError::Symbol {
                    lib: "libc.so.6",
                    symbol: "ibv_fork_init",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
