# cellbox R kernel runner: runs cells in one R process for the guest.
#
# The guest starts `Rscript --no-init-file -e BOOTSTRAP` with this script in CELLBOX_RUNNER
# (see runners.go) and talks to it over file descriptors 3 (guest -> runner) and 4
# (runner -> guest), one JSON message a line, as it does with the Python runner.
# Descriptors 1 and 2 are pipes the guest reads: what cells print is a stream output.
#
# guest -> runner:  {"op": "exec", "code": "...", "quiet": bool, "env": {...}}
#                   {"op": "ping"}      answered "done"
#                   {"op": "ack"}       the answer to a message with "a": 1
# runner -> guest:  {"t": "started", "n": N}   the cell runs; SIGINT now interrupts it
#                   {"t": "out", "o": {...}, "a": 1}   an output; waits for the ack
#                   {"t": "done", "ok": bool, "ename": "...", "n": N}
#
# A cell's top-level expressions run one after another in the global environment, as at
# R's prompt. A visible value is shown: a display_data (the last expression's, an
# execute_result) with its printed text and, for tables, HTML (package repr). Plots go to a
# PNG device and are shown when the cell ends. Needs package jsonlite, and sh and cat.
local({
  # R opens connections by name only, and a pipe's /proc/self/fd name is the guest's, not
  # this user's to open: a cat with the descriptor relays each way, deaf to the SIGINT that
  # interrupts a cell (the kernel's whole process group gets it).
  inp <- pipe("trap '' INT; exec cat <&3", open = "r", encoding = "UTF-8")
  outp <- pipe("trap '' INT; exec cat >&4", open = "w", encoding = "UTF-8")
  count <- 0L
  running <- FALSE
  has_repr <- requireNamespace("repr", quietly = TRUE)
  plot_dir <- file.path(tempdir(), "cellbox-plots")
  dir.create(plot_dir, showWarnings = FALSE)

  json <- function(x) {
    as.character(jsonlite::toJSON(x, auto_unbox = TRUE, null = "null", na = "null", digits = NA, force = TRUE))
  }
  send <- function(msg) {
    flush(stdout())
    flush(stderr())
    writeLines(json(msg), outp, useBytes = TRUE)
    flush(outp)
  }
  read_line <- function() {
    repeat {
      line <- tryCatch(readLines(inp, n = 1L, warn = FALSE), interrupt = function(i) NULL)
      if (is.null(line)) next # a late interrupt, between cells
      if (length(line) == 0L) quit(save = "no", status = 0L) # the guest is gone
      return(line)
    }
  }
  output <- function(o) {
    if (!running) return(invisible())
    send(list(t = "out", o = o, a = 1L))
    repeat {
      m <- tryCatch(jsonlite::fromJSON(read_line()), error = function(e) NULL)
      if (identical(m$op, "ack")) return(invisible())
    }
  }

  # What a value shows: its printed text and, for a table, its HTML.
  bundle <- function(value) {
    text <- paste(utils::capture.output(print(value)), collapse = "\n")
    data <- list("text/plain" = text)
    if (has_repr && (is.data.frame(value) || is.matrix(value))) {
      html <- tryCatch(repr::repr_html(value), error = function(e) NULL)
      if (!is.null(html)) data[["text/html"]] <- paste(html, collapse = "\n")
    }
    data
  }

  # Plots: a PNG device that opens when a cell plots; its pages are shown at the cell's end.
  options(device = function(...) {
    grDevices::png(filename = file.path(plot_dir, "plot-%03d.png"), width = 7, height = 5, units = "in", res = 100, type = "cairo")
  })
  flush_plots <- function() {
    while (grDevices::dev.cur() > 1L) grDevices::dev.off()
    for (f in sort(list.files(plot_dir, full.names = TRUE))) {
      png <- readBin(f, "raw", file.info(f)$size)
      unlink(f)
      output(list(type = "display_data", data = list("image/png" = jsonlite::base64_enc(png), "text/plain" = "<plot>")))
    }
  }
  options(warn = 1L) # a warning is printed when it happens, not at a top level there is none of

  error_output <- function(e) {
    if (inherits(e, "interrupt")) {
      return(list(type = "error", ename = "Interrupted", evalue = "the cell was interrupted", traceback = list("Interrupted")))
    }
    call <- conditionCall(e)
    msg <- conditionMessage(e)
    tb <- if (is.null(call)) paste0("Error: ", msg) else paste0("Error in ", paste(deparse(call, nlines = 1L), collapse = ""), ": ", msg)
    list(type = "error", ename = class(e)[[1L]], evalue = msg, traceback = list(tb))
  }

  run_cell <- function(msg) {
    quiet <- isTRUE(msg$quiet)
    if (!quiet) count <<- count + 1L
    env <- msg$env
    saved <- list()
    for (k in names(env)) {
      saved[[k]] <- Sys.getenv(k, unset = NA)
      do.call(Sys.setenv, stats::setNames(list(env[[k]]), k))
    }
    running <<- TRUE
    send(list(t = "started", n = count))
    ok <- TRUE
    ename <- ""
    fail <- function(e) {
      o <- error_output(e)
      ok <<- FALSE
      ename <<- o$ename
      output(o)
    }
    exprs <- tryCatch(parse(text = msg$code, keep.source = FALSE, srcfile = NULL), error = function(e) e, interrupt = function(i) i)
    if (inherits(exprs, "condition")) {
      if (inherits(exprs, "error")) {
        exprs <- simpleCondition(sub("^<text>:", "line ", conditionMessage(exprs)))
        class(exprs) <- c("SyntaxError", "error", "condition")
      }
      fail(exprs)
    } else {
      n <- length(exprs)
      for (i in seq_len(n)) {
        res <- tryCatch(withVisible(eval(exprs[[i]], envir = globalenv())), error = function(e) e, interrupt = function(i) i)
        if (inherits(res, "condition")) {
          fail(res)
          break
        }
        if (res$visible) {
          shown <- tryCatch(bundle(res$value), error = function(e) e, interrupt = function(i) i)
          if (inherits(shown, "condition")) {
            fail(shown)
            break
          }
          if (i == n && !quiet) {
            output(list(type = "execute_result", execution_count = count, data = shown))
          } else {
            output(list(type = "display_data", data = shown))
          }
        }
      }
    }
    tryCatch(flush_plots(), error = function(e) fail(e), interrupt = function(i) fail(i))
    for (k in names(saved)) {
      if (is.na(saved[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, stats::setNames(list(saved[[k]]), k))
    }
    running <<- FALSE
    send(list(t = "done", ok = ok, ename = ename, n = count))
  }

  repeat {
    msg <- tryCatch(jsonlite::fromJSON(read_line(), simplifyVector = FALSE), error = function(e) NULL)
    if (is.null(msg)) next
    if (identical(msg$op, "exec")) {
      run_cell(msg)
    } else if (identical(msg$op, "ping")) {
      send(list(t = "done", ok = TRUE, n = count))
    }
  }
})
