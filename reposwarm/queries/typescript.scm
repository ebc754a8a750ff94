; Definitions
(function_declaration
  name: (identifier) @name.definition.function) @definition.function

(generator_function_declaration
  name: (identifier) @name.definition.function) @definition.function

(function_signature
  name: (identifier) @name.definition.function) @definition.function

(class_declaration
  name: (type_identifier) @name.definition.class) @definition.class

(abstract_class_declaration
  name: (type_identifier) @name.definition.class) @definition.class

(interface_declaration
  name: (type_identifier) @name.definition.interface) @definition.interface

(type_alias_declaration
  name: (type_identifier) @name.definition.type) @definition.type

(enum_declaration
  name: (identifier) @name.definition.enum) @definition.enum

(internal_module
  name: (identifier) @name.definition.module) @definition.module

(method_definition
  name: [(property_identifier) (private_property_identifier)] @name.definition.method) @definition.method

(method_signature
  name: (property_identifier) @name.definition.method) @definition.method

(abstract_method_signature
  name: (property_identifier) @name.definition.method) @definition.method

(public_field_definition
  name: [(property_identifier) (private_property_identifier)] @name.definition.field) @definition.field

(variable_declarator
  name: (identifier) @name.definition.function
  value: [(arrow_function) (function_expression) (generator_function)]) @definition.function

(program
  (lexical_declaration
    (variable_declarator
      name: (identifier) @name.definition.constant) @definition.constant))

(program
  (export_statement
    declaration: (lexical_declaration
      (variable_declarator
        name: (identifier) @name.definition.constant) @definition.constant)))

; References
(call_expression
  function: (identifier) @name.reference.call)

(call_expression
  function: (member_expression
    property: [(property_identifier) (private_property_identifier)] @name.reference.call))

(new_expression
  constructor: (identifier) @name.reference.class)

(new_expression
  constructor: (member_expression
    property: (property_identifier) @name.reference.class))

(extends_clause
  value: (identifier) @name.reference.class)

(type_identifier) @name.reference.type

(import_specifier
  name: (identifier) @name.reference.import)

(import_clause
  (identifier) @name.reference.import)
